# Run at every build (cmake -P): writes OUT defining FERRY_GIT_COMMIT, the source tree's commit ("-dirty" when
# tracked files differ from it; empty without git), touching OUT only when that changes so nothing rebuilds.
execute_process(COMMAND git -C "${SOURCE_DIR}" rev-parse --short=12 HEAD RESULT_VARIABLE status
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT status EQUAL 0)
  set(commit "")
else()
  execute_process(COMMAND git -C "${SOURCE_DIR}" diff --quiet HEAD -- RESULT_VARIABLE dirty ERROR_QUIET)
  if(NOT dirty EQUAL 0)
    string(APPEND commit "-dirty")
  endif()
endif()
file(CONFIGURE OUTPUT "${OUT}" CONTENT "#define FERRY_GIT_COMMIT \"${commit}\"\n")
