// Moved to <peal/presets/rope.hpp> (docs/architecture.md §1). This forwarding header keeps
// `#include <peal/rope.hpp>` working for one release (peal 0.1.x) and is removed after it.
#pragma once

#include "presets/rope.hpp"
