#!/usr/bin/env bash
# readable_test_names.sh BUILD_DIR TEST_BINARY...: ctest's names hold no "# GetParam() = ...", and no test binary
# lists a parameter as its bytes ("4-byte object <01-00 00-00>"): each has a name generator and a PrintTo.
set -uo pipefail
build=$1
shift
if ctest --test-dir "$build" -N | grep -E 'GetParam|byte object'; then
  echo "ctest names parameterised tests with their parameter's printout (gtest_discover_tests NO_PRETTY_VALUES)"
  exit 1
fi
for binary in "$@"; do
  if "$binary" --gtest_list_tests | grep 'byte object'; then
    echo "$binary prints a parameter as its bytes: give its type a PrintTo"
    exit 1
  fi
done
echo "every test name readable"
