"""The one HTTP server of the viewer (viewer/server.py), for a built report and the live one: what it
answers, how a reply that fails is said, where it binds, and an address it cannot bind."""

from __future__ import annotations

import subprocess
import threading
import urllib.error
import urllib.request

import pytest

from profiler.errors import InputError, ProfviewError
from viewer.server import Reply, ReportServer, fixed

from support.cli import REPO, profview_command, python_env

PAGE = b"<!DOCTYPE html><title>profview report</title>"


def get(url: str) -> tuple[int, str, bytes]:
    """(status, content type, body) of a GET, errors included."""
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.headers["Content-Type"], r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read()


@pytest.fixture
def server():
    started = []

    def start(routes) -> ReportServer:
        started.append(ReportServer(routes).start())
        return started[-1]

    yield start
    for s in started:
        s.close()
    assert not [t for t in threading.enumerate() if t.name == "profview-server"]


def test_a_built_report_is_served_on_loopback_at_its_paths_only(server):
    s = server(fixed(PAGE))
    assert s.url.startswith("http://127.0.0.1:")
    for path in ("", "index.html", "report.html", "?tab=overview"):
        status, kind, body = get(s.url + path)
        assert (status, kind, body) == (200, "text/html; charset=utf-8", PAGE)
    assert get(s.url + "favicon.ico")[0] == 204
    for path in ("etc/passwd", "live.json", "../report.html"):
        assert get(s.url + path)[0] == 404


def test_a_reply_that_fails_is_one_sentence_and_the_server_goes_on(server, capfd):
    def vanished(query):
        raise ProfviewError("the recording's directory was removed")

    def broken(query):
        return {}["missing"]

    s = server(
        {
            "/": vanished,
            "/data.json": broken,
            "/echo": lambda query: Reply(repr(sorted(query.items())).encode(), "text/plain"),
        }
    )
    status, kind, body = get(s.url)
    assert status == 500 and kind.startswith("text/plain")
    assert body.decode() == "profview: cannot build /: the recording's directory was removed"
    status, _, body = get(s.url + "data.json")
    assert status == 500 and body.decode() == "profview: cannot build /data.json: KeyError: 'missing'"
    assert get(s.url + "echo?have=3&x=a")[2] == b"[('have', ['3']), ('x', ['a'])]"  # still serving
    err = capfd.readouterr().err.splitlines()
    assert err == [
        "profview: cannot build /: the recording's directory was removed",
        "profview: cannot build /data.json: KeyError: 'missing'",
    ]


@pytest.mark.parametrize("host", ["h" * 300, "256.256.256.256"])
def test_an_address_that_cannot_be_bound_is_one_sentence(host):
    with pytest.raises(InputError, match=r"^cannot serve on h{80}:0: |^cannot serve on 256\.256\.256\.256:0: "):
        ReportServer(fixed(PAGE), host=host)


@pytest.mark.parametrize("live", [False, True])
def test_the_cli_refuses_an_address_it_cannot_bind_in_one_line(tmp_path, live):
    """The fixed report and the live one share the server, so they fail the same way."""
    from support.viewer_fixtures import Spec, write_run

    target = write_run(tmp_path / "run", Spec(steps=4, ops_per_step=2))
    (target / "raw").mkdir(exist_ok=True)
    args = [str(target), "--no-browser", "--host", "h" * 300] + (["--live"] if live else [])
    result = subprocess.run(
        profview_command(*args), cwd=REPO, env=python_env(), capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith(f"profview: error: cannot serve on {'h' * 80}:0: ")
    assert "Traceback" not in result.stderr
    assert lines[:-1] == [
        f"profview: warning: serving on {'h' * 300} makes the report (op names, paths) reachable "
        "from other machines; the default 127.0.0.1 keeps it local"
    ]
