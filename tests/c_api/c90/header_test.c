/* The C API's headers compiled as ISO C90 with -pedantic-errors: a C consumer on any standard can include them. */
#include <stdio.h>
#include <string.h>

#include "rotary/rotary_c.h"

int main(void) {
  rotary_spec_t* spec = NULL;
  double inv_freq[64];
  int64_t count = 0;
  const char* version = rotary_version();
  if (version == NULL || strlen(version) == 0) {
    fprintf(stderr, "rotary_version returned nothing\n");
    return 1;
  }
  if (rotary_spec_from_preset("llama-3.1-8b", &spec) != ROTARY_OK) {
    fprintf(stderr, "%s\n", rotary_last_error());
    return 1;
  }
  if (rotary_spec_inv_freq(spec, -1, inv_freq, 64, &count) != ROTARY_OK || count != 64 || inv_freq[0] != 1.0) {
    fprintf(stderr, "inv_freq[0] = %g (%s)\n", inv_freq[0], rotary_last_error());
    rotary_spec_free(spec);
    return 1;
  }
  rotary_spec_free(spec);
  printf("c90 header ok (rotary %s)\n", version);
  return 0;
}
