"""A stranger on loopback standing in for the vendors' clouds, so a test sees whether an agent would
send podkit's key anywhere but the endpoint.

An agent runs under bubblewrap with its own ``/etc/hosts``, in which each vendor host an agent may
fall back on (:data:`VENDOR_HOSTS`: OpenAI, Anthropic, Google, Fireworks, Hugging Face, OpenRouter,
the agents' own clouds) is an address of the loopback range where the stranger listens: HTTPS on
443 with a certificate for every one of those names, from a CA of its own that the agent is told to
trust (``NODE_EXTRA_CA_CERTS``, ``SSL_CERT_FILE``, ``REQUESTS_CA_BUNDLE``), and plain HTTP on 80.
The stranger records every request (host, method, path, headers, body) and answers 401; the test
then asks whether the key is in any of them. Ports 80 and 443 need root, as the e2e layer runs
(bubblewrap too). Everything else stays as it was: the endpoint is on
loopback, and this machine reaches no vendor anyway.
"""

from __future__ import annotations

import http.server
import json
import ssl
import subprocess
import threading
from pathlib import Path

#: The loopback address every vendor host resolves to inside the agent's sandbox.
ADDRESS = "127.77.0.1"
VENDOR_HOSTS = (
    "api.openai.com",
    "api.anthropic.com",
    "generativelanguage.googleapis.com",
    "cloudcode-pa.googleapis.com",
    "oauth2.googleapis.com",
    "play.googleapis.com",
    "api.fireworks.ai",
    "router.huggingface.co",
    "api-inference.huggingface.co",
    "huggingface.co",
    "openrouter.ai",
    "api.together.xyz",
    "api.groq.com",
    "api.mistral.ai",
    "api.deepseek.com",
    "api.x.ai",
    "llm-proxy.app.all-hands.dev",
    "app.all-hands.dev",
    "api.cline.bot",
    "api.kilo.ai",
    "api.kilocode.ai",
    "opencode.ai",
    "models.dev",
    "dashscope.aliyuncs.com",
    "api.githubcopilot.com",
)


class Stranger:
    """The stranger's two servers, its CA, the hosts file and the requests it saw."""

    def __init__(self, folder: Path, address: str = ADDRESS):
        self.folder, self.address = folder, address
        folder.mkdir(parents=True, exist_ok=True)
        self.ca = folder / "ca.crt"
        self.hosts = folder / "hosts"
        self.seen: list[dict] = []
        self._lock = threading.Lock()
        self._servers: list[http.server.ThreadingHTTPServer] = []

    def start(self) -> Stranger:
        self._certificates()
        names = " ".join(VENDOR_HOSTS)
        self.hosts.write_text(f"127.0.0.1 localhost\n::1 localhost\n{self.address} {names}\n")
        plain = http.server.ThreadingHTTPServer((self.address, 80), self._handler("http"))
        secure = http.server.ThreadingHTTPServer((self.address, 443), self._handler("https"))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.folder / "server.crt", self.folder / "server.key")
        secure.socket = context.wrap_socket(secure.socket, server_side=True, do_handshake_on_connect=False)
        for server in (plain, secure):
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self._servers.append(server)
        return self

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()

    def _certificates(self) -> None:
        """A CA of its own, and a certificate for every vendor host signed by it (openssl)."""
        key, csr, crt = (self.folder / f"server.{ext}" for ext in ("key", "csr", "crt"))
        ca_key = self.folder / "ca.key"
        sans = ",".join(f"DNS:{name}" for name in VENDOR_HOSTS)
        ext = self.folder / "san.ext"
        ext.write_text(f"subjectAltName={sans}\nbasicConstraints=CA:FALSE\n")
        for argv in (
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", self.ca]
            + ["-days", "2", "-subj", "/CN=podkit stranger CA", "-addext", "basicConstraints=critical,CA:TRUE"]
            + ["-addext", "keyUsage=critical,keyCertSign,cRLSign"],
            ["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, "-subj", "/CN=stranger"],
            ["openssl", "x509", "-req", "-in", csr, "-CA", self.ca, "-CAkey", ca_key, "-CAcreateserial"]
            + ["-out", crt, "-days", "2", "-extfile", ext],
        ):
            subprocess.run([str(a) for a in argv], check=True, capture_output=True, timeout=60)

    def _handler(self, scheme: str):
        stranger = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _record(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(min(length, 1 << 20)).decode(errors="replace") if length else ""
                with stranger._lock:
                    stranger.seen.append(
                        {
                            "scheme": scheme,
                            "host": self.headers.get("Host"),
                            "method": self.command,
                            "path": self.path,
                            "headers": dict(self.headers),
                            "body": body,
                        }
                    )
                data = json.dumps({"error": {"message": "stranger: not the endpoint", "code": 401}}).encode()
                self.send_response(401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _record

            def log_message(self, *args):
                pass

        return Handler

    def wrap(self, argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        """``argv`` run under bubblewrap with the stranger's hosts file; ``env`` told to trust its CA
        (where podkit's setup names no CA of its own)."""
        trust = {"NODE_EXTRA_CA_CERTS": str(self.ca), "SSL_CERT_FILE": str(self.ca), "REQUESTS_CA_BUNDLE": str(self.ca)}
        wrapped = ["bwrap", "--dev-bind", "/", "/", "--ro-bind", str(self.hosts), "/etc/hosts", "--", *argv]
        return wrapped, {**trust, **env}

    def saw(self, secret: str) -> list[str]:
        """Where the stranger was sent ``secret``: one "scheme host method path" per request."""
        with self._lock:
            return [
                f"{r['scheme']} {r['host']} {r['method']} {r['path']}" for r in self.seen if secret in json.dumps(r)
            ]

    def hosts_asked(self) -> list[str]:
        with self._lock:
            return sorted({f"{r['scheme']}://{r['host']}" for r in self.seen})
