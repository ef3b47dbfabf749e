"""The Docker image's file set, checked without Docker (there is no engine here).

The Dockerfile is replayed step by step into a temporary directory, one root per stage: ``COPY``
from the build context minus ``.dockerignore``, ``COPY --from`` between stages, and the ``RUN``
steps this test knows how to replay (an unknown step fails the test, so it cannot go stale):
``npm ci`` = this checkout's node_modules of the same lockfile, ``npm run build`` for real,
``pip install .`` = the packages copied into a site-packages directory, ``pip install -e .`` = the
code imported from ``WORKDIR``. The Status API is then started from that tree the way the image's
console script runs it (no current directory on ``sys.path``) and must serve the task board at
``/board/`` and the bundle at ``/board/dist/*`` (defect 9: 500 and 404 before).
"""

from __future__ import annotations

import filecmp
import fnmatch
import glob
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.support import ROOT, StatusApiProcess, scaled

pytestmark = pytest.mark.node
# What the image's `taskcast` console script does: import taskcast.cli from the installed code.
CONSOLE_SCRIPT = [sys.executable, "-P", "-c", "import sys; from taskcast.cli import main; sys.exit(main())"]
SECRET = "image-test-secret-0123456789abcdefghijkl"


@dataclass
class Stage:
    name: str
    root: Path
    workdir: str = "/"
    import_root: Path | None = None  # where `import status_api` resolves once pip installed it
    env: dict[str, str] = field(default_factory=dict)

    def path(self, container_path: str) -> Path:
        """A path inside the stage (relative ones are relative to WORKDIR)."""
        absolute = container_path if container_path.startswith("/") else f"{self.workdir}/{container_path}"
        return self.root / absolute.lstrip("/")


def _instructions(text: str) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", text)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


def _ignore_patterns() -> list[str]:
    path = ROOT / ".dockerignore"
    lines = path.read_text().splitlines() if path.exists() else []
    patterns = [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]
    assert not [p for p in patterns if p.startswith("!")], "teach this test .dockerignore exceptions"
    return [p.strip("/") for p in patterns]


def _ignored(rel: str, patterns: list[str]) -> bool:
    """Docker's rule, reduced to what .dockerignore uses here: a path is out when it or one of its
    parent directories matches; ``**/`` matches any number of leading directories."""
    parts = rel.split("/")
    for end in range(1, len(parts) + 1):
        for pattern in patterns:
            starts = range(end) if pattern.startswith("**/") else range(1)
            bare = pattern.removeprefix("**/")
            if any(fnmatch.fnmatchcase("/".join(parts[s:end]), bare) for s in starts):
                return True
    return False


def _copy_tree(src: Path, dest: Path, rel: str, patterns: list[str] | None) -> None:
    if patterns is not None and _ignored(rel, patterns):
        return
    if src.is_dir():
        dest.mkdir(parents=True, exist_ok=True)
        for child in sorted(src.iterdir()):
            _copy_tree(child, dest / child.name, f"{rel}/{child.name}", patterns)
    else:
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest)


def _copy(stage: Stage, args: str, stages: dict[str, Stage], patterns: list[str]) -> None:
    words = shlex.split(args)
    source_stage = None
    if words[0].startswith("--from="):
        source_stage = stages[words.pop(0).removeprefix("--from=")]
    *sources, dest = words
    for source in sources:
        if source_stage is not None:
            matches = [source_stage.path(source)]
        else:
            matches = [Path(p) for p in sorted(glob.glob(str(ROOT / source)))]
            matches = [m for m in matches if not _ignored(str(m.relative_to(ROOT)), patterns)]
        assert matches, f"COPY {source}: nothing to copy"
        for match in matches:
            assert match.exists(), f"COPY {source}: {match} does not exist"
            into = dest.endswith("/") or len(sources) > 1 or len(matches) > 1 or match.is_dir()
            target = stage.path(dest) / (match.name if into and not match.is_dir() else "")
            rel = None if source_stage is not None else str(match.relative_to(ROOT))
            if match.is_dir():
                for child in sorted(match.iterdir()):
                    _copy_tree(child, target / child.name, f"{rel}/{child.name}", patterns if rel else None)
            else:
                _copy_tree(match, target, rel or match.name, patterns if rel else None)


PIP_OPTIONS = {"--no-cache-dir", "-e"}


def _this_project(spec: str) -> bool:
    """``.`` or ``.[extra,…]``: the extras add dependencies, not files of the tree."""
    return re.fullmatch(r"\.(\[[a-z0-9_,-]+\])?", spec) is not None


def _pip_install(stage: Stage, cwd: Path, editable: bool) -> None:
    if editable:
        stage.import_root = cwd
        return
    site = stage.root / "site-packages"
    find = tomllib.loads((cwd / "pyproject.toml").read_text())["tool"]["setuptools"]
    for top in cwd.iterdir():
        wanted = any(fnmatch.fnmatchcase(top.name, p) for p in find["packages"]["find"]["include"])
        if top.is_dir() and wanted and (top / "__init__.py").exists():
            shutil.copytree(top, site / top.name)
    for module in find.get("py-modules", []):
        shutil.copy2(cwd / f"{module}.py", site / f"{module}.py")
    stage.import_root = site


def _run(stage: Stage, command: str) -> None:
    cwd = stage.path(stage.workdir)
    for step in (s.strip() for s in command.split("&&")):
        words = shlex.split(step)
        opts = [w for w in words[2:] if w.startswith("-")]
        if words[:2] == ["npm", "ci"]:
            lock = ROOT / "client-js" / "package-lock.json"
            assert filecmp.cmp(cwd / "package-lock.json", lock, shallow=False), "npm ci of another lockfile"
            (cwd / "node_modules").symlink_to(ROOT / "client-js" / "node_modules")
        elif words[:2] == ["npm", "run"]:
            subprocess.run(["npm", *words[1:]], cwd=cwd, check=True, capture_output=True, timeout=scaled(120))
        elif (
            words[:2] == ["pip", "install"]
            and _this_project(words[-1])
            and set(opts) <= {"--no-cache-dir", "-e"}
        ):
            _pip_install(stage, cwd, editable="-e" in opts)
        elif words[0] == "useradd":
            pass  # no file of the tree depends on it
        elif words[:2] == ["install", "-d"]:
            stage.path(words[-1]).mkdir(parents=True, exist_ok=True)  # owner: not replayed
        else:
            pytest.fail(f"tests/test_image.py does not know how to replay RUN {step!r}")


def replay(dockerfile: Path, into: Path) -> Stage:
    """Build every stage of ``dockerfile`` under ``into``; returns the final stage."""
    patterns = _ignore_patterns()
    stages: dict[str, Stage] = {}
    stage: Stage | None = None
    for op, args in _instructions(dockerfile.read_text()):
        if op == "FROM":
            words = args.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else f"stage{len(stages)}"
            stage = stages[name] = Stage(name, into / name)
            stage.root.mkdir(parents=True)
            continue
        assert stage is not None, f"{op} before FROM"
        if op == "WORKDIR":
            stage.workdir = args
            stage.path(args).mkdir(parents=True, exist_ok=True)
        elif op == "COPY":
            _copy(stage, args, stages, patterns)
        elif op == "RUN":
            _run(stage, args)
        elif op == "ENV":
            key, _, value = args.partition("=")
            stage.env[key] = value
        elif op not in ("USER", "ENTRYPOINT", "CMD", "EXPOSE", "LABEL"):
            pytest.fail(f"tests/test_image.py does not know Dockerfile instruction {op}")
    assert stage is not None, "empty Dockerfile"
    return stage


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Stage:
    if shutil.which("npm") is None:
        pytest.skip("npm is needed to build client-js")
    return replay(ROOT / "Dockerfile", tmp_path_factory.mktemp("image"))


def test_the_image_holds_the_board_the_bundle_and_the_schemas(image: Stage) -> None:
    app = image.path(image.workdir)
    for rel in ("client-js/board/index.html", "client-js/dist/taskcast.js", "client-js/dist/board.js"):
        assert (app / rel).is_file(), f"the image has no {rel}"
    assert (app / "schema" / "openapi.yaml").is_file()
    assert (app / "var").is_dir(), "no data dir for `taskcast up` (WORKDIR is root-owned)"
    assert image.import_root is not None, "the image never installs the services"
    assert not list(app.rglob("node_modules")), "node_modules leaked into the image"
    # the code the image runs is the tree's, not this checkout's
    where = subprocess.run(
        [sys.executable, "-P", "-c", "import status_api.board as b, taskcast.cli; print(b.__file__)"],
        cwd=app,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(image.import_root)},
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert Path(where).is_relative_to(image.root), where


def test_the_status_api_started_from_the_image_serves_the_board(image: Stage, tmp_path: Path) -> None:
    assert image.import_root is not None
    config = {
        "database": {"url": f"sqlite+aiosqlite:///{tmp_path / 'image.db'}"},
        "internal_auth": {"mode": "jwt", "jwt_secret": SECRET},
        "execution_token": {"secret": SECRET},
        "user_auth": {"mode": "dev"},
        "realtime": {"secret": SECRET},
        "reconciler": {"enabled": False},
    }
    env = {**image.env, "PYTHONPATH": str(image.import_root)}
    api = StatusApiProcess(config, tmp_path, env=env, cwd=image.path(image.workdir), launcher=CONSOLE_SCRIPT)
    api.start()
    try:
        with httpx.Client(base_url=api.url, timeout=scaled(10)) as http:
            page = http.get("/board/")
            assert page.status_code == 200, page.text
            assert page.headers["content-type"].startswith("text/html")
            for bundle in ("taskcast.js", "board.js"):
                r = http.get(f"/board/dist/{bundle}")
                assert r.status_code == 200, (bundle, r.status_code, r.text[:200])
                assert "javascript" in r.headers["content-type"]
                assert r.content == (image.path(image.workdir) / "client-js/dist" / bundle).read_bytes()
        assert "Traceback" not in api.log_text(), api.log_text()
    finally:
        api.terminate()
