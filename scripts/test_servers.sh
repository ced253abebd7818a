#!/usr/bin/env bash
# What the remote-file tests' servers need (tests/remote/servers.py): nginx from Debian's packages,
# and moto (an S3 server) from PyPI in a virtual environment of its own, build-python/servers.
# Installs what is missing and prints the path of the Python that runs servers.py.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=$root/build-python/servers
sudo=$([ "$(id -u)" = 0 ] || echo sudo)

if ! command -v nginx >/dev/null && [ ! -x /usr/sbin/nginx ]; then
  echo "installing nginx" >&2
  $sudo apt-get update -qq && $sudo apt-get install -y -qq nginx-light >/dev/null
fi
# moto 5.2.6 answers every anonymous HEAD of an object on the public endpoint with 403, where
# 5.2.5 and earlier check it as a GET (the remote tests' HEAD of s3://kvik-public/...).
moto_ok='import moto.server, boto3; from importlib.metadata import version as v
assert tuple(int(p) for p in v("moto").split(".")[:3]) < (5, 2, 6)'
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "$moto_ok" 2>/dev/null; then
  echo "installing moto into $venv" >&2
  if ! python3 -m venv --clear "$venv" 2>/dev/null; then
    $sudo apt-get update -qq && $sudo apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv --clear "$venv"
  fi
  "$venv/bin/python" -m pip install -q --upgrade pip >&2
  "$venv/bin/python" -m pip install -q "moto[server]<5.2.6" boto3 >&2
fi
echo "$venv/bin/python"
