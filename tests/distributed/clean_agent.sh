#!/bin/sh
# An ssh stand-in for this machine: `clean_agent.sh HOST COMMAND` runs COMMAND with sh in an
# environment as clean as ssh gives (PATH and HOME only), whatever HOST is.
exec env -i PATH="$PATH" HOME="$HOME" sh -c "$2"
