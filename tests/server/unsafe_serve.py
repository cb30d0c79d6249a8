"""`simia serve` on the UNSAFE store: the durability test's control server (test code only).

Run as `python tests/server/unsafe_serve.py <simia serve arguments>` (HTTP transport).
It parses the arguments with simia's own parser and composes the server exactly as
`simia serve` does, except that the store acknowledges calls before committing them.
"""

from __future__ import annotations

import sys

import uvicorn
from simia.cli import build_parser
from simia.cli.serve import compose
from unsafe_store import UnsafeStore


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(["serve", *argv])
    app, _ = compose(args, lambda a: UnsafeStore(a.db, synchronous=a.synchronous))
    print(f"UNSAFE control server (acknowledges before committing) on http://{args.host}:{args.port}", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", timeout_graceful_shutdown=5)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
