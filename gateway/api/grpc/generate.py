"""Regenerate the committed gRPC modules from api.proto (dev only: needs grpcio-tools).

``python -m gateway.api.grpc.generate [OUT_DIR]`` writes ``api_pb2.py``, ``api_pb2.pyi`` and
``api_pb2_grpc.py`` into OUT_DIR (default: this package), with the generated absolute import
rewritten to a package-relative one.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
OUTPUTS = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py")


def generate(out_dir: Path) -> None:
    from grpc_tools import protoc  # dev dependency

    args = [
        "protoc",
        f"-I{HERE}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        str(HERE / "api.proto"),
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    grpc_module = out_dir / "api_pb2_grpc.py"
    text = grpc_module.read_text()
    grpc_module.write_text(text.replace("import api_pb2 as api__pb2", "from . import api_pb2 as api__pb2"))


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
