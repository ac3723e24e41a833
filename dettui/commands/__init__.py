"""The CLI's commands, one module per noun. They raise DettuiErrors; cli.py prints them."""
