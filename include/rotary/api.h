/* Export/visibility macro for rotary's public symbols (hidden by default); C-style comments: rotary_c.h includes it. */
#pragma once
#if defined(_WIN32)
#  if defined(ROTARY_SHARED) && defined(ROTARY_BUILDING_LIBRARY)
#    define ROTARY_API __declspec(dllexport)
#  elif defined(ROTARY_SHARED)
#    define ROTARY_API __declspec(dllimport)
#  else
#    define ROTARY_API
#  endif
#else
#  define ROTARY_API __attribute__((visibility("default")))
#endif
