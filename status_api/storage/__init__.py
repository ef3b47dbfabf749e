"""SQLAlchemy (async) storage of the Status API: tables, repository, outbox. Only this package and
``status_api/service.py`` touch the database."""
