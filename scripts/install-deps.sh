#!/bin/sh
# Debian 12 packages pipehost builds and tests with.  Run as root (or with sudo).
set -e
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
	build-essential autoconf automake libtool pkg-config make \
	libinih-dev check libopenblas-dev libcjson-dev zlib1g-dev libxxhash-dev \
	libopenmpi-dev openmpi-bin \
	dataset-fashion-mnist fortunes >/dev/null
echo "pipehost: build dependencies and Fashion-MNIST installed"
