"""Django's SQLite backend with one writer queue per database file in each process
(``base.DatabaseWrapper``)."""
