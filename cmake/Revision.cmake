# Writes OUT, a header defining KTUNE_GIT_REVISION as `git describe` of SOURCE
# says now ("unknown" outside a git checkout), at every build: results stamp
# the revision that built them, not the one the build folder was configured
# at. OUT is rewritten only when its text changes, so nothing else rebuilds.
execute_process(COMMAND git describe --always --dirty --abbrev=7 WORKING_DIRECTORY ${SOURCE}
                OUTPUT_VARIABLE revision OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT revision)
  set(revision unknown)
endif()
set(text "#define KTUNE_GIT_REVISION \"${revision}\"\n")
set(old "")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT old STREQUAL text)
  file(WRITE ${OUT} "${text}")
endif()
