// Moved to <peal/presets/alibi.hpp> (docs/architecture.md §1). This forwarding header keeps
// `#include <peal/alibi.hpp>` working for one release (peal 0.1.x) and is removed after it.
#pragma once

#include "presets/alibi.hpp"
