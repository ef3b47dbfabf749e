"""``taskcast token``: mint development / service JWTs for the Status API's roles, for LOCAL use
(docs/quickstart-worker.md). Reads the secrets from a Status API config file (and its
``TASKCAST_STATUS_API_*`` overrides), or from the data dir of ``taskcast up`` (``--data-dir``: its
generated ``secrets.json``, never created here), signs with them and prints the token on stdout.

* ``--role coordinator | policy-executor | admin``: a service JWT (``internal_auth.jwt_secret``,
  HS256): ``{sub, roles, exp[, tenant]}`` — what ``POST /internal/v1/tasks`` and the admin routes take;
* ``--role user``: an end-user JWT (``user_auth.secret`` in ``hs`` mode): ``{sub, tenant, projects, exp}``.

Workers need no token of their own: each step's executionToken comes with the task's creation
(or an attempt) and is renewed by the SDK. Never prints a secret; refuses (exit 2) when the config
has no HS secret for the role.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import jwt

SERVICE_ROLES = ("coordinator", "policy-executor", "admin")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="taskcast token", description=__doc__.splitlines()[0] if __doc__ else None
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--config", help="the Status API config file whose secrets sign the token")
    src.add_argument(
        "--data-dir", help="the data dir of a `taskcast up` (make up: ./var) whose secrets sign it"
    )
    p.add_argument("--role", required=True, choices=[*SERVICE_ROLES, "user"])
    p.add_argument("--sub", required=True, help="producerId of a service, or the user id")
    p.add_argument("--tenant", help="tenant (service: binds the credential to it; user: required)")
    p.add_argument("--projects", default="", help="user: comma-separated project memberships")
    p.add_argument("--ttl", type=int, default=3600, help="seconds until exp (default 3600)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from status_api.config import Config, ConfigError, InternalAuthConfig, UserAuthConfig, load_config

    try:
        if args.data_dir:
            # What `taskcast up` configures (taskcast/up.py): service JWTs with its generated key,
            # dev user auth.
            secret = _up_secret(Path(args.data_dir))
            cfg = Config(
                internal_auth=InternalAuthConfig(mode="jwt", jwt_secret=secret),
                user_auth=UserAuthConfig(mode="dev"),
            )
        else:
            cfg = load_config(args.config)
    except (ConfigError, OSError, ValueError) as exc:
        print(f"taskcast token: {exc}", file=sys.stderr)
        return 2
    if args.ttl < 1:
        print("taskcast token: --ttl must be >= 1", file=sys.stderr)
        return 2
    now = int(time.time())
    claims: dict[str, object] = {"sub": args.sub, "iat": now, "exp": now + args.ttl}
    if args.role == "user":
        if cfg.user_auth.mode != "hs" or not cfg.user_auth.secret:
            print(
                f"taskcast token: user_auth.mode is {cfg.user_auth.mode!r}; --role user needs mode hs with a "
                "secret (dev mode takes the header X-Taskcast-Dev-User: tenant/user instead)",
                file=sys.stderr,
            )
            return 2
        if not args.tenant:
            print("taskcast token: --role user needs --tenant", file=sys.stderr)
            return 2
        claims[cfg.user_auth.tenant_claim] = args.tenant
        claims[cfg.user_auth.projects_claim] = [p for p in args.projects.split(",") if p]
        if cfg.user_auth.user_claim != "sub":
            claims[cfg.user_auth.user_claim] = args.sub
        secret, alg = cfg.user_auth.secret, cfg.user_auth.algorithms[0]
        audience, issuer = cfg.user_auth.audience, cfg.user_auth.issuer
    else:
        ia = cfg.internal_auth
        if ia.mode != "jwt" or not ia.jwt_secret:
            print(
                "taskcast token: service tokens need internal_auth.mode jwt with jwt_secret", file=sys.stderr
            )
            return 2
        claims["roles"] = [args.role]
        if args.tenant:
            claims["tenant"] = args.tenant
        secret, alg = ia.jwt_secret, ia.jwt_algorithms[0]
        audience, issuer = ia.audience, ia.issuer
    if not alg.startswith("HS"):
        print(
            f"taskcast token: algorithm {alg} needs a private key; this command signs HS* only",
            file=sys.stderr,
        )
        return 2
    if audience:
        claims["aud"] = audience
    if issuer:
        claims["iss"] = issuer
    print(jwt.encode(claims, secret, algorithm=alg))
    print(
        "taskcast token: for local development only; production credentials come from your IdP",
        file=sys.stderr,
    )
    return 0


def _up_secret(data_dir: Path) -> str:
    """The service-JWT key ``taskcast up`` generated into ``data_dir``.

    Raises:
        ValueError: no usable ``secrets.json`` there (``taskcast up`` has not run with that dir).
    """
    path = data_dir / "secrets.json"
    if not path.exists():
        raise ValueError(f"no {path}: start `taskcast up --data-dir {data_dir}` (make up) once first")
    key = json.loads(path.read_text(encoding="utf-8")).get("service_jwt_secret")
    if not isinstance(key, str) or len(key) < 32:
        raise ValueError(f"{path} has no service_jwt_secret")
    return key
