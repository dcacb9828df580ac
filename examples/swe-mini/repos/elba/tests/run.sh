# runs one test: sh tests/run.sh TEST
. ./lib/helpers.sh
. ./tests/cases.sh
"$1"
