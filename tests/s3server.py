"""Loopback servers for the remote-tier tests: a real S3 API (moto's server mode) and a black hole.

Nothing here mocks a client: the code under test talks HTTP to 127.0.0.1 through s3fs/aiobotocore exactly as
it would to AWS S3 or MinIO, configured only through the standard environment (AWS_ENDPOINT_URL, AWS_*).
"""

from __future__ import annotations

import logging
import os
import socket
import uuid

FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",  # never ask an instance-metadata endpoint for credentials
    "AWS_CONFIG_FILE": "/nonexistent/graphcache-tests/aws-config",  # ignore the user's ~/.aws
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/graphcache-tests/aws-credentials",
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
}
# Settings that would point the clients elsewhere than the test server.
FOREIGN_SETTINGS = ("AWS_PROFILE", "AWS_ENDPOINT_URL_S3", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS",
                    "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy")


def s3_env(endpoint: str) -> dict[str, str]:
    """The environment that points botocore (and so s3fs) at ``endpoint`` with fake credentials."""
    return {**FAKE_CREDENTIALS, "AWS_ENDPOINT_URL": endpoint}


def apply_env(monkeypatch, endpoint: str) -> None:
    for name in FOREIGN_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    for name in list(os.environ):
        if name.startswith("FSSPEC_S3"):
            monkeypatch.delenv(name)
    for name, value in s3_env(endpoint).items():
        monkeypatch.setenv(name, value)


class S3Server:
    """moto's S3 server on a free 127.0.0.1 port, in a thread of this process."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        self.running = True

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def create_bucket(self, prefix: str = "graphcache") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def objects(self, bucket: str, prefix: str = "") -> dict[str, bytes]:
        """Every object under ``prefix``: key -> bytes (read with boto3, independently of the code under test)."""
        client = self.client()
        found = {}
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                found[item["Key"]] = client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
        return found

    def put(self, bucket: str, key: str, data: bytes) -> None:
        self.client().put_object(Bucket=bucket, Key=key, Body=data)

    def stop(self) -> None:
        if self.running:
            self._server.stop()
            self.running = False


class BlackHole:
    """A TCP port on 127.0.0.1 that accepts connections (the kernel does) and never answers: a hung server."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.endpoint = f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    def close(self) -> None:
        self._sock.close()
