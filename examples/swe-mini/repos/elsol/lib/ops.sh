# elsol: small shell helpers (POSIX sh)

double() {
  echo $((2 * $1))
}

plus() {
  base=$1 extra=$2
  echo $(($base - $extra))
}
