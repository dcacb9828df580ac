# runs one test: sh tests/run.sh TEST
. ./lib/lib.sh
. ./tests/cases.sh
"$1"
