"""Unit tests of gvx_client against a small in-process stand-in of gvx serve.

(The real service is exercised by integration/serve_test.go, which runs
examples/swebench with this client against gvx serve.)
"""

import base64
import json
import os
import socketserver
import struct
import sys
import tempfile
import threading
import unittest
from http.server import BaseHTTPRequestHandler, HTTPServer

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from gvx_client import Client, GvxError, NotImplementedByServer  # noqa: E402

KEY = "e2b_" + "ab" * 20


class Handler(BaseHTTPRequestHandler):
    templates = {}
    files = {}
    log = []
    bodies = []

    def log_message(self, *a):
        pass

    def _json(self, status, obj=None):
        body = b"" if obj is None else json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n)

    def _route(self, method):
        Handler.log.append((method, self.path, dict(self.headers)))
        if not self.headers.get("E2b-Sandbox-Id") and self.headers.get("X-API-KEY") != KEY:
            return self._json(401, {"code": 401, "message": "Invalid API key"})
        p = self.path
        if p == "/gvx/v1/templates" and method == "GET":
            return self._json(200, list(Handler.templates.values()))
        if p == "/gvx/v1/templates" and method == "POST":
            t = json.loads(self._body())
            Handler.templates[t["name"]] = t
            return self._json(201, t)
        if p.startswith("/gvx/v1/templates/") and method == "DELETE":
            name = p.rsplit("/", 1)[1]
            if Handler.templates.pop(name, None) is None:
                return self._json(404, {"code": 404, "message": "template '%s' not found" % name})
            return self._json(204)
        if "/checkpoints" in p or "/rollback" in p:
            return self._json(501, {"code": 501, "message": "needs gvx's checkpoint/restore"})
        if p == "/v2/sandboxes" and method == "POST":
            req = json.loads(self._body())
            Handler.bodies.append(req)
            return self._json(201, {"sandboxID": "isb1", "templateID": req["templateID"], "envdAccessToken": "tok"})
        if p == "/sandboxes/isb1/network" and method == "PUT":
            Handler.bodies.append(json.loads(self._body()))
            return self._json(204)
        if p.startswith("/sandboxes/") and method == "DELETE":
            return self._json(204) if p.endswith("isb1") else self._json(404, {"code": 404, "message": "not found"})
        if p == "/process.Process/Start":
            assert self.headers["X-Access-Token"] == "tok"
            body = self._body()
            n = struct.unpack(">I", body[1:5])[0]
            req = json.loads(body[5:5 + n])
            cmd = req["process"]["args"][-1]
            self.send_response(200)
            self.send_header("Content-Type", "application/connect+json")
            self.end_headers()
            events = [{"event": {"start": {"pid": 7}}},
                      {"event": {"data": {"stdout": base64.b64encode(cmd.encode()).decode()}}},
                      {"event": {"data": {"stderr": base64.b64encode(b"e").decode()}}},
                      {"event": {"end": {"exitCode": 3, "exited": True, "status": "exit status 3", "error": "exit status 3"}}}]
            for e in events:
                b = json.dumps(e).encode()
                self.wfile.write(struct.pack(">BI", 0, len(b)) + b)
            self.wfile.write(struct.pack(">BI", 2, 2) + b"{}")
            return None
        if p.startswith("/files?") and method == "POST":
            body = self._body()
            path = p.split("path=", 1)[1].replace("%2F", "/")
            content = body.split(b"\r\n\r\n", 1)[1].rsplit(b"\r\n--", 1)[0]
            Handler.files[path] = content
            return self._json(200, [{"name": path.rsplit("/", 1)[1], "path": path, "type": "file"}])
        if p.startswith("/files?") and method == "GET":
            path = p.split("path=", 1)[1].replace("%2F", "/")
            if path not in Handler.files:
                return self._json(404, {"code": 404, "message": "no such file"})
            data = Handler.files[path]
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return None
        return self._json(404, {"code": 404, "message": "no such route"})

    def do_GET(self):
        self._route("GET")

    def do_POST(self):
        self._route("POST")

    def do_DELETE(self):
        self._route("DELETE")

    def do_PUT(self):
        self._route("PUT")


class UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    def get_request(self):
        req, _ = super().get_request()
        return req, ("local", 0)


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = HTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=cls.srv.serve_forever, daemon=True).start()
        cls.url = "http://127.0.0.1:%d" % cls.srv.server_address[1]

    @classmethod
    def tearDownClass(cls):
        cls.srv.shutdown()
        cls.srv.server_close()

    def client(self):
        return Client(self.url, KEY)

    def test_templates(self):
        c = self.client()
        c.put_template("py", "gvx.test/py:1", poolSize=2)
        self.assertEqual([t["name"] for t in c.templates()], ["py"])
        self.assertEqual(c.templates()[0]["poolSize"], 2)
        c.delete_template("py")
        with self.assertRaises(GvxError) as cm:
            c.delete_template("py")
        self.assertEqual(cm.exception.status, 404)
        self.assertIn("not found", cm.exception.message)

    def test_checkpoint_not_implemented(self):
        c = self.client()
        with self.assertRaises(NotImplementedByServer) as cm:
            c.checkpoint("isb1")
        self.assertEqual(cm.exception.status, 501)
        self.assertIn("checkpoint/restore", str(cm.exception))

    def test_network(self):
        c = self.client()
        Handler.bodies.clear()
        sb = c.create("net", allow_internet_access=False, allow_out=["pypi.org"], deny_out=["0.0.0.0/0"])
        sb.update_network(deny_out=["10.0.2.2"])
        sb.update_network()
        create, update, lift = Handler.bodies
        self.assertEqual(create["allow_internet_access"], False)
        self.assertEqual(create["network"], {"allowOut": ["pypi.org"], "denyOut": ["0.0.0.0/0"]})
        self.assertEqual(update, {"denyOut": ["10.0.2.2"]})
        self.assertEqual(lift, {})

    def test_bad_key(self):
        with self.assertRaises(GvxError) as cm:
            Client(self.url, "e2b_00").templates()
        self.assertEqual(cm.exception.status, 401)

    def test_sandbox_run_files_kill(self):
        c = self.client()
        sb = c.create("swebench", metadata={"k": "v"})
        self.assertEqual(sb.sandbox_id, "isb1")
        seen = []
        r = sb.run("echo hi", on_stdout=seen.append)
        self.assertEqual((r.exit_code, r.stdout, r.stderr), (3, "echo hi", "e"))
        self.assertEqual(seen, ["echo hi"])
        start = [h for m, p, h in Handler.log if p == "/process.Process/Start"][-1]
        self.assertEqual(start["E2b-Sandbox-Id"], "isb1")
        self.assertEqual(start["Connect-Timeout-Ms"], "60000")
        sb.write("/home/user/a.txt", "data\n")
        self.assertEqual(sb.read("/home/user/a.txt"), b"data\n")
        with self.assertRaises(GvxError) as cm:
            sb.read("/home/user/missing")
        self.assertEqual(cm.exception.status, 404)
        self.assertTrue(sb.kill())
        self.assertFalse(c.kill("iother"))

    def test_unix_socket(self):
        d = tempfile.mkdtemp()
        path = os.path.join(d, "s.sock")
        srv = UnixHTTPServer(path, Handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        try:
            self.assertEqual(Client("unix://" + path, KEY).templates(), list(Handler.templates.values()))
        finally:
            srv.shutdown()
            srv.server_close()
            os.unlink(path)

    def test_config_errors(self):
        with self.assertRaises(ValueError):
            Client("ftp://x", KEY)
        env = os.environ.pop("E2B_API_KEY", None)
        try:
            with self.assertRaises(ValueError):
                Client(self.url)
        finally:
            if env:
                os.environ["E2B_API_KEY"] = env


if __name__ == "__main__":
    unittest.main()
