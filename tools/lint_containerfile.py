"""Lint a Containerfile/Dockerfile for the rules the gpufed image promises (no builder needed).

    python tools/lint_containerfile.py Containerfile [--uid 10001]

Rules (each finding names its line):
  multi-stage        at least two FROM stages, the last one named, COPY --from a build stage into it
  pinned-base        every FROM (or the ARG default it expands) is pinned by @sha256:<64 hex>; no :latest
  non-root           the final stage ends with USER <uid>[:<gid>], numeric, not 0 (kubelet's runAsNonRoot
                     can only verify numeric users); with --uid, exactly that uid
  exec-form          ENTRYPOINT and CMD in JSON (exec) form, so signals reach the broker
  no-remote-add      no ADD of a URL (use a verified download in a RUN, or COPY)
  no-secrets         no ENV/ARG whose name says password, token, secret or key with a value
  no-sudo            no sudo, no chmod 777
  apt-hygiene        apt-get install with --no-install-recommends and the lists removed in the same RUN
  pip-no-cache       pip install with --no-cache-dir (or PIP_NO_CACHE_DIR set)
Exit 0 when clean, 1 with findings, 2 on usage errors.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
SECRET_NAME = re.compile(r"(PASSWORD|PASSWD|TOKEN|SECRET|API_?KEY|PRIVATE_?KEY)", re.IGNORECASE)


@dataclass(frozen=True)
class Instruction:
    line: int
    op: str
    args: str


def parse(text: str) -> list[Instruction]:
    """Instructions with continuation lines joined and comments dropped."""
    out: list[Instruction] = []
    buf, start = "", 0
    for n, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue
        if not buf:
            start = n
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        buf += stripped
        op, _, args = buf.partition(" ")
        out.append(Instruction(start, op.upper(), args.strip()))
        buf = ""
    if buf:
        op, _, args = buf.partition(" ")
        out.append(Instruction(start, op.upper(), args.strip()))
    return out


def lint(text: str, uid: int | None = None) -> list[str]:
    ins = parse(text)
    problems: list[str] = []
    args: dict[str, str] = {}
    stages: list[tuple[Instruction, str | None]] = []
    env_sets_no_cache = False

    def expand(ref: str) -> str:
        return re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda m: args.get(m.group(1), m.group(0)), ref)

    for i in ins:
        if i.op == "ARG":
            name, _, value = i.args.partition("=")
            if value:
                args[name.strip()] = value.strip().strip('"')
            if value and SECRET_NAME.search(name):
                problems.append(f"line {i.line}: no-secrets: ARG {name} has a default value")
        elif i.op == "FROM":
            parts = i.args.split()
            image = expand(next(p for p in parts if not p.startswith("--")))
            name = parts[parts.index("AS") + 1] if "AS" in parts else (
                parts[parts.index("as") + 1] if "as" in parts else None
            )
            stages.append((i, name))
            known_stage = any(n == image for _, n in stages[:-1])
            if not known_stage and image != "scratch":
                if not DIGEST.search(image):
                    problems.append(f"line {i.line}: pinned-base: {image} is not pinned by @sha256 digest")
                if re.search(r":latest(@|$)", image):
                    problems.append(f"line {i.line}: pinned-base: {image} uses the latest tag")
        elif i.op == "ENV":
            if "PIP_NO_CACHE_DIR" in i.args:
                env_sets_no_cache = True
            for m in re.finditer(r"([A-Za-z_][A-Za-z0-9_]*)=(\S+)", i.args):
                if SECRET_NAME.search(m.group(1)):
                    problems.append(f"line {i.line}: no-secrets: ENV {m.group(1)} is set in the image")
        elif i.op == "ADD" and re.search(r"(^|\s)(https?|ftp)://", i.args):
            problems.append(f"line {i.line}: no-remote-add: ADD of a URL")
        elif i.op == "RUN":
            if re.search(r"(^|[;&|\s])sudo\s", i.args):
                problems.append(f"line {i.line}: no-sudo: RUN uses sudo")
            if re.search(r"chmod\s+(-R\s+)?777", i.args):
                problems.append(f"line {i.line}: no-sudo: chmod 777")
            if "apt-get install" in i.args:
                if "--no-install-recommends" not in i.args:
                    problems.append(f"line {i.line}: apt-hygiene: apt-get install without --no-install-recommends")
                if "rm -rf /var/lib/apt/lists" not in i.args:
                    problems.append(f"line {i.line}: apt-hygiene: apt lists not removed in the same RUN")
            if re.search(r"pip3? install", i.args) and "--no-cache-dir" not in i.args and not env_sets_no_cache:
                problems.append(f"line {i.line}: pip-no-cache: pip install without --no-cache-dir")
        elif i.op in ("ENTRYPOINT", "CMD"):
            try:
                ok = isinstance(json.loads(i.args), list)
            except ValueError:
                ok = False
            if not ok:
                problems.append(f"line {i.line}: exec-form: {i.op} is not in JSON exec form")

    if len(stages) < 2:
        problems.append("multi-stage: the file has fewer than two FROM stages")
        return problems
    final_from, final_name = stages[-1]
    if final_name is None:
        problems.append(f"line {final_from.line}: multi-stage: the final stage has no name (FROM ... AS name)")
    final = [i for i in ins if i.line >= final_from.line]
    if not any(i.op == "COPY" and "--from=" in i.args for i in final):
        problems.append("multi-stage: the final stage copies nothing from a build stage (COPY --from=...)")
    users = [i for i in final if i.op == "USER"]
    if not users:
        problems.append("non-root: the final stage sets no USER")
    else:
        last = users[-1]
        user = last.args.split(":")[0]
        if not user.isdigit():
            problems.append(f"line {last.line}: non-root: USER {last.args} is not numeric")
        elif int(user) == 0:
            problems.append(f"line {last.line}: non-root: USER is root (0)")
        elif uid is not None and int(user) != uid:
            problems.append(f"line {last.line}: non-root: USER {user}, expected {uid}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--uid", type=int, default=None, help="the uid the final USER must be")
    ns = parser.parse_args(argv)
    try:
        text = ns.file.read_text()
    except OSError as exc:
        print(f"{ns.file}: cannot read: {exc.strerror}", file=sys.stderr)
        return 2
    problems = lint(text, ns.uid)
    for p in problems:
        print(f"{ns.file}: {p}")
    if not problems:
        print(f"{ns.file}: ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
