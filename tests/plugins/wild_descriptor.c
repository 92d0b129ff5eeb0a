/* SPDX-License-Identifier: MIT */
/* Test plugin: a descriptor whose layer list points at no ops struct (a
 * wild pointer): reading it crashes, and the message must name the file. */
#include <stdint.h>

#include <pipehost/plugin.h>

static const ph_layer_ops *const layers[] = { (const ph_layer_ops *)(uintptr_t)16, NULL };
PH_PLUGIN(layers, NULL, NULL)
