#!/bin/sh
# SPDX-License-Identifier: MIT
# Print the INI reference, generated from the core's table of sections
# (ph_core_sections: every core section, its keys and, under [data], the
# data sources) and from the option tables of every plugin found (run from
# a build tree: ./scripts/ini-reference.sh).
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
bin=${PIPEHOST:-$top/pipehost}
echo '```'
"$bin" --list-options
echo
"$bin" --list-plugins | sed -e "s#from $top/#from #" -e "s#/\.libs/#/#"
echo '```'
