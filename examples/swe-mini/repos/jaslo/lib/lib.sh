# jaslo: small shell helpers (POSIX sh)

double() {
  echo $((2 * $1))
}

add() {
  price=$1 tax=$2
  echo $(($price - $tax))
}
