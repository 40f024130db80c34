#!/usr/bin/env python3
"""A small fake OpenAI-compatible model server, to try ouro offline.

Start it, then apply examples/fake.yaml (or any spec with ``provider: openai-compatible``
and ``base_url: http://127.0.0.1:8765/v1``):

    python3 examples/fake_server.py --port 8765 --seed 1 &
    ouro apply --yes examples/fake.yaml

It listens on 127.0.0.1 only, uses nothing but Python's standard library, and speaks
the part of the Chat Completions wire ouro's ``openai-compatible`` provider uses
(docs/providers.md):

- ``POST /v1/chat/completions`` with ``{"model", "max_tokens", "messages": [{"role":
  "user", "content": PROMPT}]}``; it answers ``{"choices": [{"message": {"role":
  "assistant", "content": TEXT}, "finish_reason": "stop"}], "usage":
  {"prompt_tokens", "completion_tokens"}}`` (tokens counted as 4 characters each);
- ``GET /v1/models`` (what ``ouro doctor`` asks to check a key): one model, ``fake``.

What it answers is what a model must: the whole next organism.el. It reads the
current source from the end of the prompt (after the seed organism's
``----- organism.el (current source) -----`` line) and, at random:

- keeps it as it is (``--stay``, default 0.3): the generation is ``no-change``;
- otherwise grows it: appends ``(defun fake-gene-N () VALUE)`` and updates the
  ``;; fake-trait:`` line: ``changed``; and, at random (``--die``, default 0.1), adds
  a form that kills its first life (it reads the journal's length): the next
  generation ``died`` (what it wrote is thrown away), and the one after lives on.

Randomness is per lineage and seeded: the first reply a lineage gets writes a
``;; fake-lineage: ID`` line into its organism (the ID drawn from ``--seed`` and
the order in which new lineages arrive), and every later reply to it draws from a
generator seeded by ``--seed``, that ID and the generation (the journal's length).
Replicas of a set, whose first prompts are identical, get different IDs and so
different histories; one lineage's history does not depend on what the others do.
Ctrl-C stops it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MARKER = "\n----- organism.el (current source) -----\n"
LINEAGE = re.compile(r"^;; fake-lineage: ([0-9a-f]{12})$", re.M)
TRAIT = re.compile(r"^;; fake-trait: .*$", re.M)
GENE = re.compile(r"^\(defun fake-gene-(\d+) ", re.M)
MODEL = "fake"
MAX_BODY = 8 << 20  # a request larger than this is refused (413)


class Fake:
    """The replies: one generator per lineage (see the module docstring)."""

    def __init__(self, seed: int, stay: float, die: float) -> None:
        self.seed, self.stay, self.die = seed, stay, die
        self.born = 0  # lineages seen so far without an ID
        self.lock = threading.Lock()

    def _new_id(self) -> str:
        with self.lock:
            self.born += 1
            number = self.born
        return hashlib.sha256(f"{self.seed}:lineage:{number}".encode()).hexdigest()[:12]

    def reply(self, prompt: str) -> str:
        """The next organism for this prompt."""
        head, found, source = prompt.partition(MARKER)
        if not found:
            return ""  # not an organism's request: an empty reply (no successor)
        generation = head.count("\n## gen ") + 1
        known = LINEAGE.search(source)
        lineage = known[1] if known else self._new_id()
        draw = random.Random(f"{self.seed}:{lineage}:{generation}")
        if known and draw.random() < self.stay:
            return source  # the same text: no change
        grown = _grown(source, lineage, draw)
        if draw.random() < self.die:
            return _dies_once(grown, generation)
        return grown


def _dies_once(source: str, generation: int) -> str:
    """``source`` with a first form that kills the life that sees ``generation`` lives in
    the journal (its first life: the next generation), and no other."""
    guard = ("(when (= (with-temp-buffer (insert-file-contents \"/kernel/journal.md\")\n"
             "                         (count-matches \"^## gen \" (point-min) (point-max)))\n"
             f"         {generation})\n"
             "  (kill-emacs 1))  ; fake: this body dies in its first life\n")
    first, newline, rest = source.partition("\n")
    return f"{first}{newline}{guard}{rest}"


def _grown(source: str, lineage: str, draw: random.Random) -> str:
    """``source`` with the lineage's ID, a new trait value and one more gene."""
    trait = f";; fake-trait: {draw.random():.4f}"
    if TRAIT.search(source):
        source = TRAIT.sub(trait, source, count=1)
    else:
        first, newline, rest = source.partition("\n")
        source = f"{first}{newline}{trait}\n{rest}"
    if not LINEAGE.search(source):
        first, newline, rest = source.partition("\n")
        source = f"{first}{newline};; fake-lineage: {lineage}\n{rest}"
    genes = [int(number) for number in GENE.findall(source)]
    number = max(genes, default=0) + 1
    if not source.endswith("\n"):
        source += "\n"
    return source + f"(defun fake-gene-{number} () {draw.randint(0, 999)})\n"


def _handler(fake: Fake) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "ouro-fake/1"

        def log_message(self, format: str, *args: Any) -> None:
            print(f"fake_server: {self.address_string()} {format % args}", file=sys.stderr)

        def _send(self, status: int, document: dict[str, Any]) -> None:
            body = json.dumps(document).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/v1/models":
                self._send(200, {"object": "list",
                                 "data": [{"id": MODEL, "object": "model", "owned_by": "fake"}]})
            else:
                self._send(404, {"error": {"message": f"no such path {self.path}"}})

        def do_POST(self) -> None:
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._send(404, {"error": {"message": f"no such path {self.path}"}})
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._send(413, {"error": {"message": "request too large"}})
                return
            try:
                request = json.loads(self.rfile.read(length))
                prompt = request["messages"][-1]["content"]
                assert isinstance(prompt, str)
            except (ValueError, KeyError, IndexError, TypeError, AssertionError):
                self._send(400, {"error": {"message": "expected messages[-1].content"}})
                return
            text = fake.reply(prompt)
            self._send(200, {
                "id": "fake-" + hashlib.sha256(text.encode()).hexdigest()[:16],
                "object": "chat.completion", "model": request.get("model") or MODEL,
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": text}}],
                "usage": {"prompt_tokens": len(prompt) // 4 + 1,
                          "completion_tokens": len(text) // 4 + 1}})

    return Handler


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8765, help="port on 127.0.0.1 "
                        "(0: any free one; the line printed says which)")
    parser.add_argument("--seed", type=int, default=0, help="the seed of every lineage's "
                        "generator")
    parser.add_argument("--stay", type=float, default=0.3, help="chance of no change")
    parser.add_argument("--die", type=float, default=0.1, help="chance of a dying successor")
    options = parser.parse_args(argv)
    server = ThreadingHTTPServer(("127.0.0.1", options.port),
                                 _handler(Fake(options.seed, options.stay, options.die)))
    port = server.server_address[1]
    print(f"fake_server: serving http://127.0.0.1:{port}/v1 (seed {options.seed}); "
          "Ctrl-C stops it", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
