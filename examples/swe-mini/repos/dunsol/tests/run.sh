# runs one test: sh tests/run.sh TEST
. ./lib/core.sh
. ./tests/cases.sh
"$1"
