# runs one test: sh tests/run.sh TEST
. ./lib/util.sh
. ./tests/cases.sh
"$1"
