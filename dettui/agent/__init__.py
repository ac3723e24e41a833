"""The agent: offers slots to a master and runs allocations as supervised process trees."""
