#pragma once
/// \file
/// Final gradients during backward: how a composition tells the trainer that a child's
/// parameter gradients will not change again in this pass.
///
/// Data-parallel training sums every rank's gradients (train/trainer.hpp). Waiting for the
/// whole backward before the first byte travels leaves the network idle for all of backward
/// and the cores idle for all of the sum; PyTorch DDP and llm.c instead start the sum of a
/// bucket as soon as its gradients are final. Backward runs the children of a composition in
/// reverse, and a child's gradients are final once its backward returns (every parameter has
/// one owner; a tied head borrows the embedding's table and lists no parameter of its own). So
/// after each child's backward a composition calls `gradients_final(ws, child)`, which tells
/// the workspace's listener, if one is set, every gradient of that child. Without a listener
/// (every pass but the trainer's data-parallel ones) the call is one pointer test.
///
/// Notifications may repeat (a Repeat announces a block whose SequentialBlock already announced
/// its layers) and need not cover every parameter (the embedding is final only at the very end):
/// the listener ignores what it has already heard of and treats the rest as final when
/// backward returns.

#include <string_view>

#include "parameter.hpp"
#include "spaces.hpp"
#include "workspace.hpp"

namespace hybridseq::core {

/// Hears of final gradients (the trainer's data-parallel overlap implements it).
class GradientListener {
 public:
  /// The gradient whose data starts at `data` is final for this pass.
  virtual void gradient_final(const void* data) = 0;
  /// One module's notifications are done: a point to start transfers and poll the network.
  virtual void module_final() = 0;

 protected:
  ~GradientListener() = default;
};

/// Tells the workspace's listener, if any, that `module`'s gradients are final. Compositions
/// call it after each child's backward.
template <class Module, ExecutionSpace Space>
void gradients_final(Workspace<Space>& ws, Module& module) {
  GradientListener* listener = ws.gradient_listener();
  if (!listener) return;
  for_each_parameter(module, [&](std::string_view, auto& p) { listener->gradient_final(p.grad().data()); });
  listener->module_final();
}

/// Sets the workspace's gradient listener for a scope; the previous one comes back at its end.
template <ExecutionSpace Space>
class ListenToGradients {
 public:
  ListenToGradients(Workspace<Space>& ws, GradientListener& listener) : ws_(ws), saved_(ws.gradient_listener()) {
    ws.gradient_listener() = &listener;
  }
  ~ListenToGradients() { ws_.gradient_listener() = saved_; }
  ListenToGradients(const ListenToGradients&) = delete;
  ListenToGradients& operator=(const ListenToGradients&) = delete;

 private:
  Workspace<Space>& ws_;
  GradientListener* saved_;
};

}  // namespace hybridseq::core
