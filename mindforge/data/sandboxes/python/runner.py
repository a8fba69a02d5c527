"""MindForge sandbox runner: judges verification jobs. Standard library only.

Four roles, so that nothing the candidate does can turn a failure into a pass:

``judge`` (``runner.py JOBFILE``, ``--in-container -`` for one job on stdin,
``--serve WORKDIR`` for one job a line in a warm container)
    Makes itself non-dumpable (same-uid processes can then neither read its
    memory nor write to its file descriptors through /proc), starts the
    zygote, and only then reads the job (nonce, candidate, checker tests). For
    each test it has a fresh ``test`` process forked, with its own timeout,
    and writes one record per test, tagged with the nonce, to its stdout. The
    host believes only those records; a test without a record is an error,
    never a pass. In a container it then resets it (see ``reset_container``).

``zygote``
    Forked before any job is read, so what it forks has never held a nonce,
    a test or another job. Forking costs a millisecond where a fresh
    interpreter costs tens.

``test``
    Gets one test on stdin, binds the checker's names (``answer``,
    ``html``/``dom``, ``calls``/``state``, or proxies for the candidate's
    functions), runs setup and the test code, and reports ``{"outcome",
    "message"}`` on stdout. It never learns the nonce.

``candidate``
    Runs the candidate's code (function tasks only) and answers calls from
    test processes over a pipe. Arguments and results cross as plain data
    (see ``encode``), so an object with a forged ``__eq__``, overridden
    builtins, ``sys.exit``/``os._exit`` or printed markers can only make a call
    fail. Its stdout and stderr go nowhere. It never sees the tests.

Tool sessions use ``runner.py --tool-call``: load ``tool_impl`` and the state
kept in the work folder, run one call, store the state again.
"""

from __future__ import annotations

import json
import math
import os
import select
import signal
import sys
import time
import traceback
from html.parser import HTMLParser

MAX_RESULT_BYTES = 1 << 20
MAX_MESSAGE = 2000
CANDIDATE_FDS = ()  # (request writer, reply reader) when the zygote forked this test process


# ---------------------------------------------------------------- plain data
def encode(value, depth=0):
    """Plain data to JSON with tags for what JSON lacks. Anything else is refused."""
    if depth > 100:
        raise TypeError("value nested too deeply")
    if value is None or isinstance(value, (bool, int, str)):
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 1 << 4096:
            raise TypeError("integer too large")
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$f": repr(value)}
    if isinstance(value, list):
        return [encode(v, depth + 1) for v in value]
    if isinstance(value, tuple):
        return {"$t": [encode(v, depth + 1) for v in value]}
    if isinstance(value, (set, frozenset)):
        tag = "$s" if isinstance(value, set) else "$fs"
        return {tag: [encode(v, depth + 1) for v in value]}
    if isinstance(value, dict):
        return {"$d": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if isinstance(value, (bytes, bytearray)):
        return {"$b": bytes(value).hex()}
    if isinstance(value, complex):
        return {"$c": [encode(value.real), encode(value.imag)]}
    if depth == 0:
        # A top-level result of another type (a regex match, a custom object)
        # crosses as an Opaque: truthy by the candidate's own bool(), equal
        # only to nothing, so it can satisfy `assert f(x)` but never `==`.
        try:
            truth = bool(value)
        except Exception:  # noqa: BLE001 - a hostile __bool__ counts as false
            truth = False
        return {"$o": [type(value).__name__, truth is True]}
    raise TypeError(f"cannot pass a {type(value).__name__} across the sandbox boundary (plain data only)")


class Opaque:
    """Stands for a result that is not plain data; compares equal to nothing."""

    __slots__ = ("truth", "type_name")

    def __init__(self, type_name, truth):
        self.type_name, self.truth = str(type_name), bool(truth)

    def __bool__(self):
        return self.truth

    def __eq__(self, other):
        return False

    def __ne__(self, other):
        return True

    __hash__ = None

    def __repr__(self):
        return f"<{self.type_name} object from the candidate>"


def decode(value):
    if isinstance(value, list):
        return [decode(v) for v in value]
    if isinstance(value, dict):
        if len(value) != 1:
            raise ValueError("malformed value")
        (tag, body), = value.items()
        if tag == "$f":
            return float(body)
        if tag == "$t":
            return tuple(decode(v) for v in body)
        if tag == "$s":
            return {decode(v) for v in body}
        if tag == "$fs":
            return frozenset(decode(v) for v in body)
        if tag == "$d":
            return {decode(k): decode(v) for k, v in body}
        if tag == "$b":
            return bytes.fromhex(body)
        if tag == "$c":
            return complex(decode(body[0]), decode(body[1]))
        if tag == "$o":
            return Opaque(body[0], body[1])
        raise ValueError(f"unknown tag {tag}")
    return value


def _short(text):
    text = str(text)
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE] + "...[truncated]"


def _no_dump():
    """Make /proc/self unreadable and unwritable for same-uid processes."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except Exception:  # noqa: BLE001 - best effort where prctl is missing (not Linux)
        pass


# ---------------------------------------------------------------- html
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Node:
    def __init__(self, tag, attrs, parent):
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children = []
        self._parts = []  # text and child nodes, in order

    def text(self):
        out = []
        for part in self._parts:
            out.append(part if isinstance(part, str) else part.text())
        return " ".join(" ".join(out).split())

    def get(self, name, default=None):
        return self.attrs.get(name.lower(), default)

    def _matches(self, tag, attrs):
        if tag is not None and self.tag != tag.lower():
            return False
        for name, want in attrs.items():
            name = "class" if name == "class_" else name.lower()
            have = self.attrs.get(name)
            if want is True:
                if have is None:
                    return False
            elif name == "class":
                if have is None or want not in have.split():
                    return False
            elif have != want:
                return False
        return True

    def find_all(self, tag=None, **attrs):
        found = []
        for child in self.children:
            if child._matches(tag, attrs):
                found.append(child)
            found.extend(child.find_all(tag, **attrs))
        return found

    def find(self, tag=None, **attrs):
        hits = self.find_all(tag, **attrs)
        return hits[0] if hits else None

    def __repr__(self):
        return f"<{self.tag} {self.attrs}>"


class _TreeBuilder(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {}, None)
        self.cur = self.root

    def handle_starttag(self, tag, attrs):
        node = Node(tag.lower(), {k.lower(): (v if v is not None else "") for k, v in attrs}, self.cur)
        self.cur.children.append(node)
        self.cur._parts.append(node)
        if node.tag not in VOID:
            self.cur = node

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag.lower() not in VOID:
            self.cur = self.cur.parent

    def handle_endtag(self, tag):
        tag = tag.lower()
        node = self.cur
        while node is not self.root and node.tag != tag:
            node = node.parent
        if node is not self.root:  # close it and anything left open inside it
            self.cur = node.parent

    def handle_data(self, data):
        self.cur._parts.append(data)


def parse_html(html):
    builder = _TreeBuilder()
    builder.feed(html)
    builder.close()
    return builder.root


# ---------------------------------------------------------------- pipes
def _send(fh, obj):
    data = json.dumps(obj).encode()
    fh.write(len(data).to_bytes(4, "big") + data)
    fh.flush()


def _recv(fh, deadline=None):
    head = _read_exact(fh, 4, deadline)
    size = int.from_bytes(head, "big")
    if size > MAX_RESULT_BYTES * 16:
        raise RuntimeError("reply too large")
    return json.loads(_read_exact(fh, size, deadline))


def _read_exact(fh, n, deadline):
    buf = b""
    fd = fh.fileno()
    while len(buf) < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError("no answer in time")
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            raise EOFError("the other side closed the pipe")
        buf += chunk
    return buf


# ---------------------------------------------------------------- candidate
def candidate_main(req_fd, rep_fd):
    """Run candidate code; read calls on ``req_fd``, answer on ``rep_fd``.

    One candidate process serves the tests of a job in turn (as one import of
    a solution serves every assert in MBPP-style harnesses); the judge starts
    a fresh one after any test that did not end in a plain pass or fail.
    Replies echo the call's random id, so a test never reads an answer meant
    for a call that an earlier test abandoned.
    """
    req = os.fdopen(req_fd, "rb", buffering=0)
    rep = os.fdopen(rep_fd, "wb", buffering=0)
    source = _recv(req)["source"]
    module = {"__name__": "solution", "__builtins__": __builtins__}
    try:
        exec(compile(source, "solution.py", "exec"), module)
    except BaseException as exc:  # noqa: BLE001 - a crash at import is the candidate's failure
        _send(rep, {"ready": False, "error": _short(f"{type(exc).__name__}: {exc}")})
        return
    names = sorted(k for k, v in module.items() if callable(v) and not k.startswith("__"))
    _send(rep, {"ready": True, "names": names})
    while True:
        try:
            call = _recv(req)
        except EOFError:
            return
        try:
            result = module[call["name"]](*decode(call["args"]), **decode(call["kwargs"]))
            _send(rep, {"id": call.get("id"), "ok": True, "value": encode(result)})
        except BaseException as exc:  # noqa: BLE001 - reported to the test as an exception
            _send(rep, {"id": call.get("id"), "ok": False, "error": _short(f"{type(exc).__name__}: {exc}")})


class CandidateError(Exception):
    """The candidate raised, crashed or returned something that is not plain data."""


class Candidate:
    """The test process's handle on the job's candidate process (started by the judge)."""

    def __init__(self, fds, names, deadline):
        self.deadline = deadline
        self.req = os.fdopen(fds[0], "wb", buffering=0)
        self.rep = os.fdopen(fds[1], "rb", buffering=0)
        self.names = names

    def _reply(self):
        try:
            return _recv(self.rep, self.deadline)
        except (EOFError, OSError) as exc:
            raise CandidateError(f"candidate process died ({exc})") from None

    def call(self, name, args, kwargs):
        call_id = os.urandom(8).hex()
        try:
            _send(self.req, {"id": call_id, "name": name, "args": encode(list(args)), "kwargs": encode(kwargs)})
        except (BrokenPipeError, OSError):
            raise CandidateError("candidate process is gone") from None
        reply = self._reply()
        while reply.get("id") != call_id:  # left over from a call an earlier test abandoned
            reply = self._reply()
        if not reply.get("ok"):
            raise CandidateError(reply.get("error", "candidate call failed"))
        return decode(reply["value"])

    def proxy(self, name):
        def call(*args, **kwargs):
            return self.call(name, args, kwargs)

        call.__name__ = name
        return call


# ---------------------------------------------------------------- test
def call_tool(tools, state, name, args):
    """One tool call; bad calls become ``{"error": ...}`` results, as a real tool API answers."""
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            args = None
    if not isinstance(args, dict):
        return {}, {"error": "arguments must be a JSON object"}
    fn = tools.get(name) if isinstance(name, str) else None
    if not name or name.startswith("_") or name == "init_state" or not callable(fn):
        return args, {"error": f"unknown tool {name!r}"}
    try:
        return args, fn(state, **args)
    except (ValueError, TypeError, KeyError) as exc:
        return args, {"error": f"{type(exc).__name__}: {exc}"}


def load_tools(tool_impl):
    tools = {"__name__": "tools"}
    exec(compile(tool_impl, "tools.py", "exec"), tools)
    return tools


def replay_tools(tool_impl, transcript):
    """Replay tool calls against a fresh state; results are recomputed, never trusted."""
    tools = load_tools(tool_impl)
    state = tools["init_state"]()
    calls = []
    for raw in transcript.get("calls") or []:
        raw = raw if isinstance(raw, dict) else {}
        args, result = call_tool(tools, state, raw.get("name"), raw.get("arguments"))
        calls.append({"name": raw.get("name"), "arguments": args, "result": result})
    return calls, state


def _parse_transcript(candidate):
    try:
        transcript = json.loads(candidate)
    except ValueError as exc:
        raise CandidateError(f"candidate is not a JSON transcript: {exc}") from None
    if not isinstance(transcript, dict) or not isinstance(transcript.get("calls", []), list):
        raise CandidateError('candidate must be {"calls": [...], "answer": "..."}')
    return transcript


def test_namespace(job, deadline):
    """Names the checker sees, by output kind; returns (namespace, candidate handle or None)."""
    import re

    ns = {"__name__": "checker", "re": re, "json": json}
    kind, cand = job["kind"], job["candidate"]
    handle = None
    if kind == "function":
        handle = Candidate(CANDIDATE_FDS, job["candidate_names"], deadline)
        for name in handle.names:
            ns[name] = handle.proxy(name)
    elif kind == "text":
        ns["answer"] = cand
    elif kind == "html":
        ns["html"] = cand
        ns["dom"] = parse_html(cand)
    elif kind == "tool_calls":
        transcript = _parse_transcript(cand)
        ns["calls"], ns["state"] = replay_tools(job["tool_impl"], transcript)
        ns["answer"] = transcript.get("answer") if isinstance(transcript.get("answer"), str) else ""
    else:
        raise ValueError(f"unknown output kind {kind!r}")
    return ns, handle


def test_main():
    job = json.loads(sys.stdin.buffer.read())
    deadline = time.monotonic() + job["timeout_s"]
    out = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # what the checker prints must not mix with the result
    os.dup2(devnull, 2)
    try:
        ns, _ = test_namespace(job, deadline)
        if job.get("setup"):
            exec(compile(job["setup"], "setup.py", "exec"), ns)
        exec(compile(job["code"], f"test_{job['name']}.py", "exec"), ns)
        result = {"outcome": "pass", "message": ""}
    except AssertionError as exc:
        result = {"outcome": "fail", "message": _short(f"AssertionError: {exc}" if str(exc) else _where(exc, job["code"]))}
    except TimeoutError as exc:
        result = {"outcome": "timeout", "message": _short(str(exc))}
    except CandidateError as exc:
        result = {"outcome": "error", "message": _short(str(exc))}
    except BaseException as exc:  # noqa: BLE001 - any other exception fails the test
        result = {"outcome": "error", "message": _short(f"{type(exc).__name__}: {exc}")}
    out.write(json.dumps(result))
    out.flush()


def _where(exc, code):
    """The failing line of the test code (exec'd code has no source file to quote)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith("test_")]
    lines = code.splitlines()
    if frames and 0 < (frames[-1].lineno or 0) <= len(lines):
        return f"assertion failed: {lines[frames[-1].lineno - 1].strip()}"
    return "assertion failed"


# ---------------------------------------------------------------- zygote
class Zygote:
    """A clean process that forks test and candidate processes on request.

    It is forked before the judge reads any job, so nothing it forks has ever
    held a nonce, a test or another job in memory: a candidate that reads its
    own memory finds only this file. A fork costs about a millisecond where a
    fresh interpreter costs tens, which is most of a warm job's time.
    """

    def __init__(self):
        import socket

        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            mine.close()
            _zygote_loop(theirs)
            os._exit(0)
        theirs.close()
        self.pid, self.sock = pid, mine

    def spawn(self, role, cwd, fds):
        """Fork a ``role`` process ("test" or "candidate") owning ``fds``; its pid, or None."""
        import socket

        try:
            socket.send_fds(self.sock, [json.dumps({"role": role, "cwd": cwd}).encode()], fds)
            reply = self.sock.recv(64)
        except OSError:
            return None
        return int(reply) if reply.isdigit() else None

    def alive(self):
        try:
            return os.waitpid(self.pid, os.WNOHANG) == (0, 0)
        except ChildProcessError:
            return False

    def close(self):
        self.sock.close()
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (OSError, ChildProcessError):
            pass


def _zygote_loop(sock):
    import socket

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # forked processes are reaped by the kernel
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)  # nothing forked from here may write to the judge's stdout
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(sock, 4096, 8)
        except OSError:
            return
        if not msg:
            return
        pid = os.fork()
        if pid == 0:
            sock.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.setsid()  # its own process group: the judge kills it and all it started at once
            try:
                _forked_main(json.loads(msg), fds)
            finally:
                os._exit(0)
        for fd in fds:
            os.close(fd)
        sock.send(str(pid).encode())


def _forked_main(request, fds):
    global CANDIDATE_FDS
    os.chdir(request["cwd"])
    if request["role"] == "candidate":
        candidate_main(fds[0], fds[1])
        return
    os.dup2(fds[0], 0)
    os.dup2(fds[1], 1)
    os.close(fds[0])
    os.close(fds[1])
    CANDIDATE_FDS = tuple(fds[2:4])
    test_main()


# ---------------------------------------------------------------- judge
def _test_payload(job, test, timeout_s, names):
    return json.dumps({
        "kind": job["kind"], "candidate": job["candidate"], "setup": job.get("setup", ""),
        "tool_impl": job.get("tool_impl", ""), "name": test["name"], "code": test["code"],
        "timeout_s": timeout_s, "candidate_names": names,
    }).encode()


def _parse_result(out, why):
    try:
        result = json.loads(out[:MAX_RESULT_BYTES])
        assert result["outcome"] in ("pass", "fail", "error", "timeout")
        return result
    except Exception:  # noqa: BLE001 - no well-formed report: the test did not finish
        return {"outcome": "error", "message": f"test process ended without a result ({why})"}


class CandidateProcess:
    """The judge's side of a function candidate: a zygote fork holding the candidate's code."""

    def __init__(self, zygote, source, timeout_s):
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        self.pid = zygote.spawn("candidate", os.getcwd(), [req_r, rep_w])
        os.close(req_r)
        os.close(rep_w)
        self.req = os.fdopen(req_w, "wb", buffering=0)
        self.rep = os.fdopen(rep_r, "rb", buffering=0)
        self.names, self.error = [], None
        try:
            if self.pid is None:
                raise EOFError("the sandbox could not start it")
            _send(self.req, {"source": source})
            hello = _recv(self.rep, time.monotonic() + timeout_s)
            if hello.get("ready"):
                self.names = hello["names"]
            else:
                self.error = f"candidate failed to load: {hello.get('error')}"
        except (EOFError, OSError, TimeoutError, ValueError) as exc:
            self.error = f"candidate failed to load: {type(exc).__name__}: {exc}"

    @property
    def fds(self):
        return [self.req.fileno(), self.rep.fileno()]

    def close(self):
        if self.pid:
            _kill_group(self.pid)
        self.req.close()
        self.rep.close()


def run_test(zygote, job, test, timeout_s, candidate=None):
    """One test in a process forked for it; function tests call ``candidate``."""
    start = time.monotonic()
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    fds = [in_r, out_w] + (candidate.fds if candidate else [])
    pid = zygote.spawn("test", os.getcwd(), fds)
    os.close(in_r)
    os.close(out_w)
    try:
        if pid is None:
            return {"outcome": "error", "message": "the sandbox could not start the test"}, 0.0
        _write_all(in_w, _test_payload(job, test, timeout_s, candidate.names if candidate else []))
        os.close(in_w)
        in_w = None
        out, finished = _read_until_eof(out_r, start + timeout_s + 1.0)
        if not finished:
            return {"outcome": "timeout", "message": f"test exceeded {timeout_s:.1f}s"}, time.monotonic() - start
        return _parse_result(out, "it exited or was killed"), time.monotonic() - start
    finally:
        if in_w is not None:
            os.close(in_w)
        os.close(out_r)
        if pid:
            _kill_group(pid)


def _write_all(fd, data):
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view):]
    except OSError:  # the test process is gone; its missing result says so
        pass


def _read_until_eof(fd, deadline):
    chunks, size = [], 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return b"".join(chunks), False
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks), True
        if size < MAX_RESULT_BYTES:
            chunks.append(chunk)
        size += len(chunk)


def _kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def judge_job(job, workdir, zygote, out):
    """Run every test of ``job``, writing one nonce-tagged record per test to ``out``."""
    nonce = job.pop("nonce")
    rundir = os.path.join(workdir, "run")
    os.makedirs(rundir, exist_ok=True)
    os.chdir(rundir)
    timeout_s = float(job.get("timeout_s", 5.0))
    candidate = None
    for test in job["tests"]:
        if job["kind"] == "function" and candidate is None:
            candidate = CandidateProcess(zygote, job["candidate"], timeout_s)
        if candidate is not None and candidate.error:
            result, took = {"outcome": "error", "message": _short(candidate.error)}, 0.0
        else:
            result, took = run_test(zygote, job, test, timeout_s, candidate)
        if candidate is not None and result["outcome"] not in ("pass", "fail"):
            candidate.close()  # it may be hung or dead: the next test gets a fresh one
            candidate = None
        record = {"test": test["name"], "duration_s": round(took, 4), **result}
        out.write(f"@@MF {nonce} {json.dumps(record)}\n")
        out.flush()
    if candidate is not None:
        candidate.close()
    os.chdir(workdir)
    return nonce


def judge_main(job_path, in_container):
    """Judge the job read from ``job_path`` (``-``: stdin; a file is deleted once read)."""
    _no_dump()
    zygote = Zygote()  # before the job is read: see Zygote
    if job_path == "-":
        job = json.loads(sys.stdin.buffer.read())
        workdir = os.getcwd()
    else:
        with open(job_path, encoding="utf-8") as fh:
            job = json.load(fh)
        os.unlink(job_path)
        workdir = os.path.dirname(os.path.abspath(job_path))
    nonce = judge_job(job, workdir, zygote, sys.stdout)
    clean = reset_container(workdir, keep=(zygote.pid,)) if in_container else True
    zygote.close()
    sys.stdout.write(f"@@MF {nonce} {json.dumps({'done': True, 'clean': clean})}\n")
    sys.stdout.flush()


def serve_main(workdir):
    """Judge jobs read from stdin, one JSON object a line, until stdin closes.

    A warm container keeps this process and its zygote between jobs, so a job
    costs neither a ``docker exec`` nor an interpreter start. After each job
    the container is reset (see ``reset_container``); the closing record says
    whether that worked and whether the zygote is still intact, and the host
    recycles the container otherwise.
    """
    _no_dump()
    zygote = Zygote()
    while True:
        line = sys.stdin.buffer.readline()
        if not line:
            break
        job = json.loads(line)
        nonce = judge_job(job, workdir, zygote, sys.stdout)
        clean = reset_container(workdir, keep=(zygote.pid,)) and zygote.alive()
        sys.stdout.write(f"@@MF {nonce} {json.dumps({'done': True, 'clean': clean})}\n")
        sys.stdout.flush()
    zygote.close()


def reset_container(workdir, keep=()):
    """Leave the container as it started: only PID 1 and us alive, writable places empty.

    The root filesystem is read-only and the network is off, so the writable
    tmpfs folders, the processes and SysV IPC objects are all a job can leave
    behind. Returns False when something could not be undone; the host then
    recycles the container instead of reusing it.
    """
    me = os.getpid()
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:  # killed processes take a moment to leave /proc
        others = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, me, *keep)]
        if not others:
            break
        for pid in others:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.002)
    clean = not [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, me, *keep)]
    import shutil

    for folder in (workdir, "/tmp", "/dev/shm"):
        try:
            entries = os.listdir(folder)
        except OSError:
            continue
        for name in entries:
            path = os.path.join(folder, name)
            try:
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)
            except OSError:
                clean = False
    for table in ("shm", "msg", "sem"):
        try:
            with open(f"/proc/sysvipc/{table}") as fh:
                if len(fh.read().splitlines()) > 1:
                    clean = False
        except OSError:
            pass
    return clean


def tool_call_main(workdir):
    """One tool call in a session, read from stdin as {tool_impl, name, arguments}.

    The tools' state lives in WORKDIR/state.json between calls.
    """
    call = json.loads(sys.stdin.buffer.read())
    tools = load_tools(call["tool_impl"])
    name, args_json = call["name"], call["arguments"]
    state_path = os.path.join(workdir, "state.json")
    if os.path.exists(state_path):
        with open(state_path, encoding="utf-8") as fh:
            state = json.load(fh)
    else:
        state = tools["init_state"]()
    _, result = call_tool(tools, state, name, args_json)
    tmp = state_path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(state, fh)
    os.replace(tmp, state_path)
    sys.stdout.write(json.dumps({"result": encode_json_safe(result)}))


def encode_json_safe(value):
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return {"error": f"tool returned non-JSON data of type {type(value).__name__}"}


if __name__ == "__main__":
    if sys.argv[1:2] == ["--tool-call"]:
        tool_call_main(sys.argv[2])
    elif sys.argv[1:2] == ["--serve"]:
        serve_main(sys.argv[2])
    elif sys.argv[1:2] == ["--in-container"]:
        judge_main(sys.argv[2], in_container=True)
    else:
        judge_main(sys.argv[1], in_container=False)
