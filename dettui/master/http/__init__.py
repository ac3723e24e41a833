"""The HTTP edge of the master: typed app keys, who calls (principal), request bodies and
their parsing, authorisation and errors (middleware), the wire helpers, the Determined shapes
of records, the OpenAPI document and the routes Determined has that dettui refuses."""
