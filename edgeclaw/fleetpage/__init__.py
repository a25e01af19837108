"""The fleet page: `edgeclaw fleet serve`, a web view of the devices on one broker.

A separate process, on any machine: it subscribes to the devices' retained and
live topics, keeps a bounded in-memory window of them (`window.py`), serves one
page of plain HTML/CSS/JS (`static/`) with Server-Sent Events for updates, and
publishes the commands the page POSTs, signed with the keys it holds
(`broker.py`); the browser never holds broker credentials or keys. Logins,
sessions and CSRF tokens are in `access.py`, the HTTP routes in `server.py`.
"""
