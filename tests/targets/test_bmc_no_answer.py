"""A BMC that does not answer: one line naming the BMC, for a closed port and for a BMC that
accepts the connection and never answers within the blueprint's timeout (real sockets on
loopback; the Prometheus client says the same through the same helper: tests/reap/test_faults.py)."""

from __future__ import annotations

import http.server
import time

import pytest
from loopback import free_port, http_server

from rackform.blueprint.targets.onprem.host_spec import Bmc
from rackform.targets.onprem.redfish import BmcError, Redfish


class Slow(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        time.sleep(2)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def client(url: str, tmp_path) -> Redfish:
    (tmp_path / "bmc-creds").write_text("admin:secret\n")
    bmc = Bmc(address=url, credentials_file="bmc-creds", timeout_s=0.5)
    return Redfish(bmc, tmp_path)


def test_a_closed_port_is_unreachable(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(BmcError) as exc:
        client(url, tmp_path).system()
    assert str(exc.value).startswith(f"BMC {url} is unreachable: ")
    assert "\n" not in str(exc.value)


def test_a_bmc_that_never_answers_times_out(tmp_path):
    with http_server(Slow) as port:
        url = f"http://127.0.0.1:{port}"
        with pytest.raises(BmcError) as exc:
            client(url, tmp_path).system()
    assert str(exc.value) == f"BMC {url} did not answer within 0.5 s"
