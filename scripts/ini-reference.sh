#!/bin/sh
# Print the INI reference, generated from the option tables of the core and
# of every plugin found (run from a build tree: ./scripts/ini-reference.sh).
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
bin=${PIPEHOST:-$top/pipehost}
echo '```'
"$bin" --list-options
echo
"$bin" --list-plugins | sed -e "s#from $top/#from #" -e "s#/\.libs/#/#"
echo '```'
