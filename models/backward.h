// Backward, derived: the backward pass of a step is its forward tape reversed, one backward op per forward op
// by a rule per op kind (the table in models/backward.cpp), so no model writes its backward by hand.
#pragma once

#include "models/model_spec.h"

namespace ferry::models {

// `spec` holds forward ops only. Appends, last forward op first, its backward op: the same name with ".bwd"
// for ".fwd", kind, layer, params and attrs, reading [gradient of the forward op's first output (none for the
// loss), the forward inputs and saved outputs its kind's rule names] and accumulating into the gradients
// ("<name>.grad", created at first write) of its forward inputs that are not batch inputs, in order.
void append_backward(ModelSpec& spec);

}  // namespace ferry::models
