"""The moto S3 server answers real HTTP requests from boto3 and s3fs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from harness.s3 import S3Server

pytestmark = pytest.mark.s3


def test_boto3_put_get_and_ranged_get(s3_server: S3Server) -> None:
    bucket = s3_server.make_bucket()
    client = s3_server.boto3_client()
    payload = bytes(range(256)) * 64
    client.put_object(Bucket=bucket, Key="a/b/object.bin", Body=payload)

    assert client.get_object(Bucket=bucket, Key="a/b/object.bin")["Body"].read() == payload
    ranged = client.get_object(Bucket=bucket, Key="a/b/object.bin", Range="bytes=100-199")
    assert ranged["Body"].read() == payload[100:200]
    listed = client.list_objects_v2(Bucket=bucket, Prefix="a/")
    assert [o["Key"] for o in listed["Contents"]] == ["a/b/object.bin"]


def test_s3fs_and_boto3_see_the_same_objects(s3_server: S3Server) -> None:
    bucket = s3_server.make_bucket()
    fs = s3_server.s3fs()
    with fs.open(f"{bucket}/dir/written-by-s3fs.txt", "wb") as f:
        f.write(b"hello from s3fs")
    client = s3_server.boto3_client()
    body = client.get_object(Bucket=bucket, Key="dir/written-by-s3fs.txt")["Body"].read()
    assert body == b"hello from s3fs"

    client.put_object(Bucket=bucket, Key="dir/written-by-boto3.txt", Body=b"hello from boto3")
    assert fs.cat_file(f"{bucket}/dir/written-by-boto3.txt") == b"hello from boto3"
    assert fs.cat_file(f"{bucket}/dir/written-by-boto3.txt", start=6, end=10) == b"from"
    assert sorted(fs.ls(f"{bucket}/dir")) == [
        f"{bucket}/dir/written-by-boto3.txt",
        f"{bucket}/dir/written-by-s3fs.txt",
    ]


def test_missing_object_is_an_error(s3_server: S3Server) -> None:
    bucket = s3_server.make_bucket()
    fs = s3_server.s3fs()
    with pytest.raises(FileNotFoundError):
        fs.cat_file(f"{bucket}/does-not-exist")


def test_env_points_a_subprocess_at_the_server(s3_server: S3Server) -> None:
    bucket = s3_server.make_bucket()
    s3_server.boto3_client().put_object(Bucket=bucket, Key="k", Body=b"from the parent")
    code = f"import boto3; print(boto3.client('s3').get_object(Bucket={bucket!r}, Key='k')['Body'].read().decode())"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(s3_server.env())
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "from the parent"
