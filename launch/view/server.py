"""The viewer's HTTP server: Python's :class:`http.server.ThreadingHTTPServer` serving a JSON API over one or two
folders (:class:`~earthrl.launch.view.episodes.Folder`) and the static page of ``static/`` (plain HTML, CSS and
JavaScript, no external asset).

Routes (``F``: folder index, ``I``: episode index in that folder):

- ``/`` and ``/static/<name>``: the page (a fixed set of files, no path taken from the request);
- ``/api/folders``: each folder's path, kind, episode count and note;
- ``/api/episodes``: every episode's list row (:meth:`Folder.summary`) with its ``folder``;
- ``/api/episode/F/I``: one episode with its turns and the quick-look PNGs of its kept workspace;
- ``/api/metrics/F``: the folder's ``metrics.jsonl`` lines;
- ``/files/F/I/<name>.png``: a PNG of episode I's workspace, read confined to the folder
  (:func:`earthrl.launch.view.confined.read_file`).
"""

from __future__ import annotations

import json
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from urllib.parse import unquote, urlsplit

from earthrl.launch.view.confined import OutsideFolder, list_files, read_file
from earthrl.launch.view.episodes import Folder
from earthrl.rewards.metrics.report import strict_json

STATIC = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8",
          "style.css": "text/css; charset=utf-8"}
"""The page's files (``earthrl/launch/view/static``) and their content types."""


def _static(name: str) -> bytes:
    return resources.files("earthrl.launch.view").joinpath("static", name).read_bytes()


class ViewerHandler(BaseHTTPRequestHandler):
    """GET handler of the routes in the module doc; ``self.server.folders`` holds the loaded folders."""

    server_version = "earthrl-view"

    def log_message(self, format, *args):  # noqa: A002 - the base class's name; requests are not logged
        return

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Security-Policy", "default-src 'self'; img-src 'self'; style-src 'self'")
        self.end_headers()
        self.wfile.write(body)

    def _json(self, value, status: int = HTTPStatus.OK) -> None:
        # a metric with nothing to average is NaN in metrics.jsonl: null here, as the browser's JSON.parse needs
        self._send(status, json.dumps(strict_json(value), allow_nan=False, default=str).encode(), "application/json")

    def _not_found(self, why: str) -> None:
        self._json({"error": why}, HTTPStatus.NOT_FOUND)

    def _episode_ref(self, f: str, i: str) -> tuple[Folder, int] | None:
        folders = self.server.folders
        if not (f.isdigit() and i.isdigit()) or int(f) >= len(folders) or int(i) >= len(folders[int(f)].episodes):
            return None
        return folders[int(f)], int(i)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        """Answer one GET (module doc); anything else is a 404 with a JSON reason."""
        parts = [unquote(p) for p in urlsplit(self.path).path.split("/") if p]
        folders = self.server.folders
        if not parts or parts == ["index.html"]:
            return self._send(HTTPStatus.OK, _static("index.html"), STATIC["index.html"])
        if len(parts) == 2 and parts[0] == "static" and parts[1] in STATIC:
            return self._send(HTTPStatus.OK, _static(parts[1]), STATIC[parts[1]])
        if parts == ["api", "folders"]:
            return self._json([{"index": n, "path": str(f.path), "kind": f.kind, "episodes": len(f.episodes),
                                "note": f.note} for n, f in enumerate(folders)])
        if parts == ["api", "episodes"]:
            return self._json([{"folder": n, **f.summary(i)} for n, f in enumerate(folders)
                               for i in range(len(f.episodes))])
        if len(parts) == 4 and parts[:2] == ["api", "episode"] and (ref := self._episode_ref(*parts[2:])):
            folder, i = ref
            ws = folder.workspace(i)
            images = list_files(folder.path, ["workspaces", ws], ".png") if ws else []
            return self._json({"folder": int(parts[2]), **folder.episodes[i], "images": images})
        if len(parts) == 3 and parts[:2] == ["api", "metrics"] and parts[2].isdigit() and int(parts[2]) < len(folders):
            return self._json(folders[int(parts[2])].metrics())
        if len(parts) == 4 and parts[0] == "files" and parts[3].endswith(".png") and (ref := self._episode_ref(*parts[1:3])):
            folder, i = ref
            ws = folder.workspace(i)
            try:
                if ws is None:
                    raise OutsideFolder("the episode kept no workspace")
                return self._send(HTTPStatus.OK, read_file(folder.path, ["workspaces", ws, parts[3]]), "image/png")
            except OutsideFolder as exc:
                return self._not_found(str(exc))
        return self._not_found(f"no such page: {self.path}")


def make_server(folders: list[Folder], host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """A server of ``folders`` bound to ``host:port`` (``port`` 0: a free one, ``server.server_address[1]``); run it
    with ``serve_forever()``.

    Raises:
        OSError: the address is taken or cannot be bound.
    """
    server = ThreadingHTTPServer((host, port), ViewerHandler)
    server.daemon_threads = True
    server.folders = folders
    return server
