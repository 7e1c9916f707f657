// Version of the rotary library (parsed by CMakeLists.txt and pyproject).
#pragma once
#define ROTARY_VERSION_MAJOR 0
#define ROTARY_VERSION_MINOR 1
#define ROTARY_VERSION_PATCH 0
#define ROTARY_VERSION_STRING "0.1.0"
