"""The admin web UI (``admin.*`` options, docs/admin.md): ``auth.py`` (password, admin token,
failed-login bound), ``endpoints.py`` (the page, its files and the admin API over the server
API's executor), ``static/`` (the page: HTML, one script, one stylesheet; no build step)."""
