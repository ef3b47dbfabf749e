"""nginx in front of local processes, rendered from THE deploy template
(deploy/nginx/taskcast.conf.template) exactly as the nginx image's envsubst renders it in
docker-compose.yml: :func:`render` fills the template, :func:`nginx_proc` wraps it in a
self-contained nginx.conf (pid, logs and temp files under one directory) and returns the
foreground process, ready when the internal listener's ``/nginx-health`` answers.
"""

from __future__ import annotations

import os
import shutil
import string
from collections.abc import Sequence
from pathlib import Path

from taskcast.dev.procs import ROOT, Proc

TEMPLATE = ROOT / "deploy" / "nginx" / "taskcast.conf.template"


def render(public_port: int, internal_port: int, gateways: Sequence[str], status_apis: Sequence[str]) -> str:
    """The template with its variables set; the template names two gateways and two Status API
    replicas (the compose file's shape): one address given is used for both slots."""
    if not gateways or not status_apis:
        raise ValueError("at least one gateway and one Status API address")
    # Like the image's envsubst: only the TASKCAST_* variables; nginx's own $vars stay.
    text = string.Template(TEMPLATE.read_text()).safe_substitute(
        TASKCAST_PUBLIC_PORT=str(public_port),
        TASKCAST_INTERNAL_PORT=str(internal_port),
        TASKCAST_GATEWAY_1=gateways[0],
        TASKCAST_GATEWAY_2=gateways[-1],
        TASKCAST_STATUS_API_1=status_apis[0],
        TASKCAST_STATUS_API_2=status_apis[-1],
    )
    if "${TASKCAST_" in text:
        raise ValueError("the template names a variable render() does not set")
    return text


def nginx_proc(
    workdir: Path,
    public_port: int,
    internal_port: int,
    gateways: Sequence[str],
    status_apis: Sequence[str],
    env: dict[str, str] | None = None,
) -> Proc:
    """An unstarted nginx :class:`Proc` serving the rendered template from ``workdir``."""
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    temp = workdir / "tmp"
    for sub in (temp, workdir / "logs"):
        sub.mkdir(parents=True, exist_ok=True)
    (workdir / "taskcast.conf").write_text(render(public_port, internal_port, gateways, status_apis))
    (workdir / "nginx.conf").write_text(
        f"""worker_processes 1;
worker_rlimit_nofile 65536;
{"user root;" if os.geteuid() == 0 else ""}
pid {workdir}/nginx.pid;
error_log {workdir}/logs/error.log warn;
events {{ worker_connections 32768; }}
http {{
    access_log off;
    client_body_temp_path {temp}/body;
    proxy_temp_path {temp}/proxy;
    fastcgi_temp_path {temp}/fastcgi;
    uwsgi_temp_path {temp}/uwsgi;
    scgi_temp_path {temp}/scgi;
    include {workdir}/taskcast.conf;
}}
"""
    )
    argv = [nginx, "-p", str(workdir), "-c", str(workdir / "nginx.conf"), "-g", "daemon off;"]
    health = f"http://127.0.0.1:{internal_port}/nginx-health"
    return Proc("nginx", argv, env, workdir / "logs" / "nginx.log", health)
