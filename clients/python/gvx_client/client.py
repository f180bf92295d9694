"""gvx serve's client: the HTTP transport, gvx's routes and envd calls."""

import base64
import http.client
import json
import os
import socket
import ssl
import struct
import urllib.parse
import uuid

ENVD_PORT = "49983"


class GvxError(Exception):
    """An error answer of gvx serve: its HTTP status and message."""

    def __init__(self, status, message, code=None):
        super().__init__("%s: %s" % (status, message))
        self.status = status
        self.message = message
        self.code = code if code is not None else status


class NotImplementedByServer(GvxError):
    """501: the server lacks what the call needs (e.g. checkpoint/restore)."""


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self._path)
        self.sock = s


class CommandResult:
    """A finished command: exit code, output, and the error text if any."""

    def __init__(self, exit_code, stdout, stderr, error=None):
        self.exit_code = exit_code
        self.stdout = stdout
        self.stderr = stderr
        self.error = error

    def __repr__(self):
        return "CommandResult(exit_code=%r, stdout=%r, stderr=%r)" % (self.exit_code, self.stdout, self.stderr)


class Client:
    """A connection to gvx serve.

    api_url is http://host:port, https://host:port (gvx serve --tls-cert;
    the certificate is checked against the system's CAs, or those of
    $SSL_CERT_FILE) or unix:///path (default: $GVX_API_URL, else
    $E2B_API_URL, else unix:///run/gvx/serve/serve.sock); api_key defaults
    to $E2B_API_KEY.
    """

    def __init__(self, api_url=None, api_key=None, timeout=120.0):
        self.api_url = api_url or os.environ.get("GVX_API_URL") or os.environ.get("E2B_API_URL") or "unix:///run/gvx/serve/serve.sock"
        self.api_key = api_key or os.environ.get("E2B_API_KEY")
        if not self.api_key:
            raise ValueError("no API key: pass api_key or set E2B_API_KEY (gvx serve's keys file holds them)")
        self.timeout = timeout
        u = urllib.parse.urlsplit(self.api_url)
        if u.scheme == "unix":
            self._unix = u.path
        elif u.scheme in ("http", "https"):
            self._unix = None
            self._netloc = u.netloc
            self._tls = ssl.create_default_context() if u.scheme == "https" else None
        else:
            raise ValueError("api_url %r: give http://host:port, https://host:port or unix:///path" % self.api_url)

    def _conn(self, timeout=None):
        t = timeout if timeout is not None else self.timeout
        if self._unix:
            return _UnixConnection(self._unix, t)
        if self._tls:
            return http.client.HTTPSConnection(self._netloc, timeout=t, context=self._tls)
        return http.client.HTTPConnection(self._netloc, timeout=t)

    def _request(self, method, path, body=None, headers=None, timeout=None, raw=False):
        h = {"X-API-KEY": self.api_key}
        h.update(headers or {})
        if body is not None and not isinstance(body, (bytes, bytearray)):
            body = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        conn = self._conn(timeout)
        try:
            conn.request(method, path, body=body, headers=h)
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        if resp.status >= 400:
            raise _error(resp.status, data)
        if raw:
            return data
        if not data:
            return None
        return json.loads(data)

    # -- gvx's routes ---------------------------------------------------

    def templates(self):
        """Every template: a list of dicts (name, image, poolSize, ...)."""
        return self._request("GET", "/gvx/v1/templates")

    def template(self, name):
        return self._request("GET", "/gvx/v1/templates/" + _q(name))

    def put_template(self, name, image, **fields):
        """Add or replace a template; fields: cmd, env, user, workdir,
        memoryMB, cpuMillis, diskMB, docker, golden, poolSize."""
        t = {"name": name, "image": image}
        t.update(fields)
        return self._request("POST", "/gvx/v1/templates", t)

    def delete_template(self, name):
        self._request("DELETE", "/gvx/v1/templates/" + _q(name))

    def reset(self, sandbox_id):
        """Replace the sandbox by a fresh one of its template (same id and token)."""
        return self._request("POST", "/gvx/v1/sandboxes/%s/reset" % _q(sandbox_id))

    def checkpoint(self, sandbox_id, async_=False):
        """Checkpoint the sandbox (processes, files, volumes); returns the
        checkpoint's handle. With async_, it returns once the sandbox is
        paused and the save goes on (its next call waits for it)."""
        body = {"async": True} if async_ else {}
        return self._request("POST", "/gvx/v1/sandboxes/%s/checkpoints" % _q(sandbox_id), body)["handle"]

    def checkpoints(self, sandbox_id=None):
        """The key's checkpoints (of one sandbox if given), oldest first."""
        path = "/gvx/v1/checkpoints"
        if sandbox_id:
            path += "?sandboxID=" + _q(sandbox_id)
        return self._request("GET", path)

    def rollback(self, sandbox_id, handle):
        """Roll the sandbox back to checkpoint handle."""
        return self._request("POST", "/gvx/v1/sandboxes/%s/rollback" % _q(sandbox_id), {"handle": handle})

    def fork(self, sandbox_id, count=1, handle=None):
        """Fork the sandbox (or a checkpoint of it) into count new ones."""
        body = {"count": count}
        if handle:
            body["handle"] = handle
        return self._request("POST", "/gvx/v1/sandboxes/%s/fork" % _q(sandbox_id), body)

    def release(self, handle):
        """Release a checkpoint."""
        self._request("DELETE", "/gvx/v1/checkpoints/" + _q(handle))

    # -- E2B's control plane (the part an episode needs) ---------------

    def create(self, template="base", timeout=300, metadata=None, env_vars=None,
               allow_internet_access=None, allow_out=None, deny_out=None):
        """Create a sandbox (E2B's POST /v2/sandboxes); returns a Sandbox.

        On a template of network "nat", allow_internet_access=False and
        allow_out / deny_out (CIDRs, addresses, DNS names; an allow_out
        rule wins over a deny_out one) narrow the template's egress policy
        for this sandbox (docs/serve.md#network).
        """
        body = {"templateID": template, "timeout": int(timeout)}
        if metadata:
            body["metadata"] = metadata
        if env_vars:
            body["envVars"] = env_vars
        body.update(_network(allow_internet_access, allow_out, deny_out, nested=True))
        r = self._request("POST", "/v2/sandboxes", body)
        return Sandbox(self, r["sandboxID"], r.get("envdAccessToken"))

    def update_network(self, sandbox_id, allow_internet_access=None, allow_out=None, deny_out=None):
        """Replace a running sandbox's narrowing (E2B's PUT
        /sandboxes/{id}/network): what is not given is cleared."""
        self._request("PUT", "/sandboxes/%s/network" % _q(sandbox_id),
                      _network(allow_internet_access, allow_out, deny_out, nested=False))

    def connect(self, sandbox_id, timeout=300):
        r = self._request("POST", "/v2/sandboxes/%s/connect" % _q(sandbox_id), {"timeout": int(timeout)})
        return Sandbox(self, r["sandboxID"], r.get("envdAccessToken"))

    def info(self, sandbox_id):
        return self._request("GET", "/sandboxes/" + _q(sandbox_id))

    def list(self):
        return self._request("GET", "/v2/sandboxes")

    def kill(self, sandbox_id):
        """Kill a sandbox; False if it was not there."""
        try:
            self._request("DELETE", "/sandboxes/" + _q(sandbox_id))
            return True
        except GvxError as e:
            if e.status == 404:
                return False
            raise


class Sandbox:
    """A sandbox of gvx serve: commands and files through its envd."""

    def __init__(self, client, sandbox_id, token):
        self.client = client
        self.sandbox_id = sandbox_id
        self._token = token

    def _envd_headers(self, user=None):
        h = {"E2b-Sandbox-Id": self.sandbox_id, "E2b-Sandbox-Port": ENVD_PORT}
        if self._token:
            h["X-Access-Token"] = self._token
        if user:
            h["Authorization"] = "Basic " + base64.b64encode((user + ":").encode()).decode()
        return h

    def run(self, cmd, cwd=None, envs=None, user=None, timeout=60.0, on_stdout=None, on_stderr=None):
        """Run cmd with /bin/bash -l -c, wait for it, return a CommandResult.

        timeout is the command's lifetime in seconds (0: none), as E2B's
        Connect-Timeout-Ms; on_stdout/on_stderr get output as it comes.
        """
        proc = {"cmd": "/bin/bash", "args": ["-l", "-c", cmd]}
        if cwd:
            proc["cwd"] = cwd
        if envs:
            proc["envs"] = envs
        msg = json.dumps({"process": proc, "stdin": False}).encode()
        body = struct.pack(">BI", 0, len(msg)) + msg
        h = self._envd_headers(user)
        h["Content-Type"] = "application/connect+json"
        h["Connect-Protocol-Version"] = "1"
        h["Connect-Timeout-Ms"] = str(int(timeout * 1000))
        conn = self.client._conn(timeout=(timeout + 30) if timeout else None)
        out, err, end, resp = [], [], None, None
        try:
            conn.request("POST", "/process.Process/Start", body=body, headers=h)
            resp = conn.getresponse()
            if resp.status != 200:
                raise _error(resp.status, resp.read())
            while True:
                hdr = resp.read(5)
                if len(hdr) < 5:
                    raise GvxError(502, "the command's stream ended early")
                flags, n = struct.unpack(">BI", hdr)
                m = json.loads(resp.read(n) or b"{}")
                if flags & 2:
                    if m.get("error"):
                        raise GvxError(500, m["error"].get("message", ""), m["error"].get("code"))
                    break
                ev = m.get("event", {})
                data = ev.get("data")
                if data:
                    if "stdout" in data:
                        s = base64.b64decode(data["stdout"]).decode(errors="replace")
                        out.append(s)
                        if on_stdout:
                            on_stdout(s)
                    if "stderr" in data:
                        s = base64.b64decode(data["stderr"]).decode(errors="replace")
                        err.append(s)
                        if on_stderr:
                            on_stderr(s)
                if "end" in ev:
                    end = ev["end"]
        finally:
            if resp is not None:
                resp.close()
            conn.close()
        if end is None:
            raise GvxError(502, "the command ended without an end event")
        return CommandResult(end.get("exitCode", 0), "".join(out), "".join(err), end.get("error"))

    def write(self, path, data, user=None):
        """Write data (str or bytes) to path in the sandbox (parents made)."""
        if isinstance(data, str):
            data = data.encode()
        boundary = uuid.uuid4().hex
        body = (
            ("--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s\"\r\n"
             "Content-Type: application/octet-stream\r\n\r\n" % (boundary, path)).encode()
            + data + ("\r\n--%s--\r\n" % boundary).encode()
        )
        h = self._envd_headers(user)
        h["Content-Type"] = "multipart/form-data; boundary=" + boundary
        return self.client._request("POST", "/files?path=" + _q(path), body, h)

    def read(self, path, user=None):
        """The bytes of path in the sandbox."""
        return self.client._request("GET", "/files?path=" + _q(path), None, self._envd_headers(user), raw=True)

    def kill(self):
        return self.client.kill(self.sandbox_id)

    def reset(self):
        return self.client.reset(self.sandbox_id)

    def checkpoint(self, async_=False):
        return self.client.checkpoint(self.sandbox_id, async_)

    def rollback(self, handle):
        return self.client.rollback(self.sandbox_id, handle)

    def update_network(self, allow_internet_access=None, allow_out=None, deny_out=None):
        return self.client.update_network(self.sandbox_id, allow_internet_access, allow_out, deny_out)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()


def _network(allow_internet_access, allow_out, deny_out, nested):
    """E2B's network fields: under "network" in a create, at the top of an
    update."""
    out, net = {}, {}
    if allow_internet_access is not None:
        out["allow_internet_access"] = bool(allow_internet_access)
    if allow_out is not None:
        net["allowOut"] = list(allow_out)
    if deny_out is not None:
        net["denyOut"] = list(deny_out)
    if nested:
        if net:
            out["network"] = net
    else:
        out.update(net)
    return out


def _q(s):
    return urllib.parse.quote(s, safe="")


def _error(status, data):
    try:
        j = json.loads(data)
        msg, code = j.get("message", ""), j.get("code")
    except ValueError:
        msg, code = data.decode(errors="replace").strip(), None
    cls = NotImplementedByServer if status == 501 else GvxError
    return cls(status, msg, code)
