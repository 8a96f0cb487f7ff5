# Run at every build (cmake -P): writes OUT defining FERRY_GIT_COMMIT, the source tree's commit ("-dirty" when
# tracked files differ from it; empty without git, or where the sources sit inside another repository), touching
# OUT only when that changes so that nothing rebuilds.
execute_process(COMMAND git -C "${SOURCE_DIR}" rev-parse --show-toplevel --short=12 HEAD RESULT_VARIABLE status
                OUTPUT_VARIABLE lines OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
set(commit "")
if(status EQUAL 0)
  string(REPLACE "\n" ";" lines "${lines}")
  list(GET lines 0 top)
  list(GET lines 1 head)
  file(REAL_PATH "${SOURCE_DIR}" source)
  file(REAL_PATH "${top}" top)
  if(top STREQUAL source)
    set(commit ${head})
    execute_process(COMMAND git -C "${SOURCE_DIR}" diff --quiet HEAD -- RESULT_VARIABLE dirty ERROR_QUIET)
    if(NOT dirty EQUAL 0)
      string(APPEND commit "-dirty")
    endif()
  endif()
endif()
file(CONFIGURE OUTPUT "${OUT}" CONTENT "#define FERRY_GIT_COMMIT \"${commit}\"\n")
