"""A real redis-server on a free 127.0.0.1 port for the Redis tests: started, stopped, restarted empty.

Nothing here mocks a client: the code under test talks RESP over TCP to a real ``redis-server`` exactly as it
would to a production one. The server keeps nothing on disk (``--save '' --appendonly no``), so a restart is
a server that came back empty.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

SEARCH = ("/usr/bin/redis-server", "/usr/sbin/redis-server", "/usr/local/bin/redis-server")
START_TIMEOUT = 60.0  # seconds a starting (or killed) server may take: an upper bound, not a wait


def redis_server_binary() -> str | None:
    """The redis-server to run, or None when this machine has none (the tests then skip, saying so)."""
    found = shutil.which("redis-server")
    if found:
        return found
    return next((path for path in SEARCH if os.access(path, os.X_OK)), None)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RedisServer:
    """One redis-server process; ``url`` points at database 0 (with the password, when one is required)."""

    def __init__(self, *, password: str | None = None, maxmemory: str | None = None) -> None:
        binary = redis_server_binary()
        if binary is None:
            raise RuntimeError("redis-server is not installed")
        self.binary = binary
        self.password = password
        self.maxmemory = maxmemory
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="graphcache-redis-")
        self.proc: subprocess.Popen | None = None
        self.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}{self.address}/0"

    @property
    def bare_url(self) -> str:
        """The URL without the password (for tests that pass it through the environment)."""
        return f"redis://{self.address}/0"

    def start(self) -> None:
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", self.dir, "--daemonize", "no", "--loglevel", "warning"]
        if self.password:
            args += ["--requirepass", self.password]
        if self.maxmemory:
            args += ["--maxmemory", self.maxmemory, "--maxmemory-policy", "noeviction"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # Polled until it answers (or exits): the bound only matters for a server that never does, so it is
        # generous enough for a loaded machine, where 10 s could pass before a starting process got the CPU.
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}")
            if self._answers():
                return
            time.sleep(0.02)
        raise RuntimeError(f"redis-server did not answer within {START_TIMEOUT} s")

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith((b"+PONG", b"-NOAUTH"))
        except OSError:
            return False

    def stop(self) -> None:
        """Stop the server (SIGKILL: nothing to flush, and it stops at once)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(START_TIMEOUT)  # SIGKILL cannot be ignored: this only waits for the kernel
        self.proc = None

    def restart(self) -> None:
        """Stop and start again on the same port: the server comes back empty."""
        self.stop()
        self.start()

    def client(self):
        """A redis-py client of its own, to look at the server independently of the code under test."""
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password, socket_timeout=5)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
