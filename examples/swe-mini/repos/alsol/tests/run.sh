# runs one test: sh tests/run.sh TEST
. ./lib/funcs.sh
. ./tests/cases.sh
"$1"
