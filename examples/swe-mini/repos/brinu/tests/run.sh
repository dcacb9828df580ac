# runs one test: sh tests/run.sh TEST
. ./lib/tools.sh
. ./tests/cases.sh
"$1"
