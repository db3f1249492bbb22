# Fuzz harnesses (fuzz/fuzz_*.cpp), one per parser of outside input. With CANVAS_LIBFUZZER=ON (clang, see
# scripts/ci-sanitize.sh) each is a libFuzzer binary: `build-fuzz/fuzz_gguf fuzz/corpus/gguf` fuzzes until
# stopped. Otherwise each links fuzz/replay_main.cpp and only replays the files it is given. Either way ctest
# replays every harness's seed corpus plus the inputs that once crashed it (fuzz/crashes/NAME), labels
# unit and fuzz.
file(GLOB CANVAS_FUZZ_HARNESSES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/fuzz/fuzz_*.cpp)
foreach(harness ${CANVAS_FUZZ_HARNESSES})
  get_filename_component(target ${harness} NAME_WE)
  string(REGEX REPLACE "^fuzz_" "" short ${target})
  add_executable(${target} ${harness})
  target_include_directories(${target} PRIVATE ${CMAKE_SOURCE_DIR}/fuzz)
  target_link_libraries(${target} PRIVATE canvas_lib)
  set(replay_flags "")
  if(CANVAS_LIBFUZZER)
    target_link_options(${target} PRIVATE -fsanitize=fuzzer)
    set(replay_flags -runs=0)
  else()
    target_sources(${target} PRIVATE ${CMAKE_SOURCE_DIR}/fuzz/replay_main.cpp)
  endif()
  if(CANVAS_TESTS)
    add_test(NAME fuzz_replay.${short}
             COMMAND ${target} ${replay_flags} ${CMAKE_SOURCE_DIR}/fuzz/corpus/${short}
                     ${CMAKE_SOURCE_DIR}/fuzz/crashes/${short})
    set_tests_properties(fuzz_replay.${short} PROPERTIES LABELS "unit;fuzz" TIMEOUT 300)
  endif()
endforeach()
