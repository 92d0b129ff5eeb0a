#!/bin/sh
# SPDX-License-Identifier: MIT
# Debian 12 packages pipehost builds and tests with.  Run it as root, or as a
# user with sudo: it then runs itself again through sudo (containers often
# run as root and have no sudo at all, so sudo is never required).
set -e
if [ "$(id -u)" -ne 0 ]; then
	if command -v sudo >/dev/null 2>&1; then
		exec sudo sh "$0" "$@"
	fi
	echo "$0: installing packages needs root, and sudo is not installed; run this script as root (e.g. su -c 'sh $0')" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
	build-essential autoconf automake libtool pkg-config make \
	libinih-dev check libopenblas-dev libcjson-dev zlib1g-dev libxxhash-dev \
	libopenmpi-dev openmpi-bin \
	dataset-fashion-mnist fortunes \
	man-db >/dev/null
echo "pipehost: build dependencies and Fashion-MNIST installed"
