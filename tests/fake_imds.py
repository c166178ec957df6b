"""A stand-in for EC2's instance metadata service (IMDSv2), for the spot agent's tests: here on
this machine's loopback (tests/roles/test_slurm_spot_agent.py) and inside a testbed VM
(tests/e2e/test_slurm_vms.py copies this file there and runs it with the VM's python3), so it is
standard library only.

As AWS documents it ("Spot Instance interruption notices", "Use IMDSv2"): `PUT
/latest/api/token` with `X-aws-ec2-metadata-token-ttl-seconds` gives a session token; `GET
/latest/meta-data/spot/instance-action` without that token is refused (401), and with it is
404 while there is no notice and 200 with the notice once there is one. The notice is whatever
the file `--notice` holds, once it exists (the test writes it, as EC2 would decide to interrupt).

    python3 fake_imds.py --port 8169 --notice /run/fake-imds/notice.json
"""

from __future__ import annotations

import argparse
import http.server
import os
import sys

TOKEN = "AQAEAFake-IMDSv2-session-token=="


def handler(notice_path: str, requests: list[str] | None = None):
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def _send(self, status: int, body: bytes = b"") -> None:
            if requests is not None:
                requests.append(f"{self.command} {self.path} {status}")
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_PUT(self) -> None:
            ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds", "")
            if self.path != "/latest/api/token":
                self._send(404)
            elif not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
                self._send(400)
            else:
                self._send(200, TOKEN.encode())

        def do_GET(self) -> None:
            if self.headers.get("X-aws-ec2-metadata-token") != TOKEN:
                self._send(401)
            elif self.path != "/latest/meta-data/spot/instance-action" or not os.path.exists(
                notice_path
            ):
                self._send(404)
            else:
                with open(notice_path, "rb") as fh:
                    self._send(200, fh.read())

    return Handler


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--notice", required=True, help="The notice's file (absent: no notice).")
    a = p.parse_args(argv)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", a.port), handler(a.notice))
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
