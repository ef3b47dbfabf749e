"""``status_api/board.py``: the board page and the built bundle are served under /board/."""

from __future__ import annotations

from pathlib import Path

from starlette.applications import Starlette
from starlette.testclient import TestClient

from status_api import board


def test_board_page_and_bundle_are_served(tmp_path: Path) -> None:
    (tmp_path / "board").mkdir()
    (tmp_path / "board" / "index.html").write_text("<title>Tasks</title>")
    (tmp_path / "board" / "board.css").write_text("body{}")
    (tmp_path / "dist").mkdir()
    (tmp_path / "dist" / "board.js").write_text("export{}")
    with TestClient(Starlette(routes=board.routes(tmp_path))) as client:
        assert "Tasks" in client.get("/board/").text
        assert client.get("/board/board.css").status_code == 200
        r = client.get("/board/dist/board.js")
        assert r.status_code == 200 and "javascript" in r.headers["content-type"]
        assert client.get("/board/../status_api/app.py").status_code == 404


def test_landing_page_points_to_the_board_the_endpoints_and_the_docs(tmp_path: Path) -> None:
    (tmp_path / "board").mkdir()
    with TestClient(Starlette(routes=board.routes(tmp_path))) as client:
        page = client.get("/", headers={"Accept": "text/html"})
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        for link in (
            'href="/board/"',
            'href="/board/?user=demo/alice"',
            'href="/openapi.json"',
            "docs/quickstart.md",
        ):
            assert link in page.text
        index = client.get("/", headers={"Accept": "application/json"})
        assert index.json()["board"] == "/board/" and "docs/client-js.md" in index.json()["docs"]


def test_favicon_is_served_and_a_missing_one_is_a_plain_404(tmp_path: Path) -> None:
    (tmp_path / "board").mkdir()
    with TestClient(Starlette(routes=board.routes(tmp_path))) as client:
        assert client.get("/favicon.ico").status_code == 404
        (tmp_path / "board" / "favicon.svg").write_text("<svg/>")
        r = client.get("/favicon.ico")
        assert r.status_code == 200 and r.headers["content-type"] == "image/svg+xml"
    assert (board.CLIENT_JS / "board" / "favicon.svg").is_file()


def test_missing_build_is_a_404_not_a_startup_error(tmp_path: Path) -> None:
    (tmp_path / "board").mkdir()
    with TestClient(Starlette(routes=board.routes(tmp_path))) as client:
        assert client.get("/board/dist/board.js").status_code == 404


def test_the_status_api_app_mounts_the_board() -> None:
    from status_api.app import create_app
    from tests.status_api.harness import load_config_dict

    cfg = load_config_dict(
        {
            "database": {"url": "sqlite+aiosqlite:///:memory:", "auto_init": False},
            "internal_auth": {"mode": "jwt", "jwt_secret": "s" * 32},
            "execution_token": {"secret": "e" * 32},
            "user_auth": {"mode": "dev"},
            "realtime": {"secret": "r" * 32},
            "reconciler": {"enabled": False},
        }
    )
    paths = {getattr(r, "path", "") for r in create_app(cfg).routes}
    assert {"/", "/favicon.ico", "/board", "/board/dist"} <= paths
    assert (board.CLIENT_JS / "board" / "index.html").is_file()


def test_board_config_script_names_the_configured_gateway(tmp_path: Path) -> None:
    (tmp_path / "board").mkdir()
    for configured, expected in (
        (None, "window.TASKCAST_BOARD = {};\n"),
        ("", 'window.TASKCAST_BOARD = {"gateway": ""};\n'),
        ("https://rt.example.com/", 'window.TASKCAST_BOARD = {"gateway": "https://rt.example.com"};\n'),
        (
            "https://x.example/</script>",
            'window.TASKCAST_BOARD = {"gateway": "https://x.example/\\u003c/script>"};\n',
        ),
    ):
        with TestClient(Starlette(routes=board.routes(tmp_path, gateway_url=configured))) as client:
            r = client.get("/board/config.js")
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/javascript")
            assert r.text == expected
    # The page loads it before its module, so the module sees window.TASKCAST_BOARD.
    html = (board.CLIENT_JS / "board" / "index.html").read_text()
    assert html.index('src="config.js"') < html.index('src="dist/board.js"')


def test_board_gateway_url_is_validated_where_it_enters() -> None:
    import pytest

    from status_api.config import ConfigError, build_config

    base = {
        "internal_auth": {"jwt_secret": "s" * 40},
        "execution_token": {"secret": "e" * 40},
        "user_auth": {"mode": "dev"},
        "realtime": {"secret": "r" * 40},
    }
    for good in ("", "http://127.0.0.1:8000", "https://rt.example.com/realtime"):
        assert build_config({**base, "board": {"gateway_url": good}}).board.gateway_url == good
    for bad in ("ws://x", "javascript:alert(1)", "//x", "http://x/?a=1"):
        with pytest.raises(ConfigError, match=r"board\.gateway_url"):
            build_config({**base, "board": {"gateway_url": bad}})
