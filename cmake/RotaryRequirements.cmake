# Build requirements: each missing one stops the configure step with the package that provides it.
include_guard(GLOBAL)

# rotary_require_package(NAME VERSION WHAT DEBIAN_PACKAGE RPM_PACKAGE): find_package(NAME [VERSION]) or stop.
macro(rotary_require_package name version what deb rpm)
  if("${version}" STREQUAL "")
    find_package(${name} QUIET)
  else()
    find_package(${name} ${version} QUIET)
  endif()
  if(NOT ${name}_FOUND)
    message(FATAL_ERROR
      "rotary needs ${what}, which CMake could not find (find_package(${name} ${version})).\n"
      "Install it:  apt-get install ${deb}   (Debian/Ubuntu)   or   dnf install ${rpm}   (Fedora/RHEL)\n"
      "or point CMake at an installed copy with -D${name}_DIR=<folder holding ${name}Config.cmake> "
      "or -DCMAKE_PREFIX_PATH=<its prefix>.")
  endif()
endmacro()

# A C++20 compiler: GCC >= 11 or Clang >= 14 (what the code is tested with).
function(rotary_require_compiler)
  set(_min "")
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 11)
    set(_min "GCC >= 11")
  elseif(CMAKE_CXX_COMPILER_ID STREQUAL "Clang" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 14)
    set(_min "Clang >= 14")
  endif()
  if(_min)
    message(FATAL_ERROR "rotary needs a C++20 compiler (${_min}); found ${CMAKE_CXX_COMPILER_ID} "
                        "${CMAKE_CXX_COMPILER_VERSION}. Install one: apt-get install g++ (Debian 12 ships GCC 12).")
  endif()
endfunction()
