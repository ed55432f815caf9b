// UnitHooks: how ZeRO (engine/zero/data_parallel.h) follows the model through a step. The transformer
// announces each unit (ParamStore::units: embedding, layer, final norm + head) before it reads its
// parameters and before and after it writes its gradients, so parameters can be gathered just in
// time and gradients reduced as soon as they are complete.
#pragma once

namespace ptrain::model {

class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  // The unit's parameters are about to be read (forward, evaluation, recompute).
  virtual void before_forward(int unit) = 0;
  // The unit's parameters are about to be read and its gradients accumulated. May be announced
  // more than once per microbatch (the tied head writes the embedding's gradient early).
  virtual void before_backward(int unit) = 0;
  // This microbatch adds nothing more to the unit's gradients.
  virtual void after_backward(int unit) = 0;
};

}  // namespace ptrain::model
