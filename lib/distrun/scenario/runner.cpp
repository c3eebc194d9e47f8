#include "distrun/scenario/runner.hpp"

#include <optional>
#include <sstream>

#include "distrun/backend/flight_recorder.hpp"
#include "distrun/comm/collectives.hpp"
#include "distrun/scenario/bench.hpp"
#include "distrun/scenario/format.hpp"
#include "distrun/scenario/results_file.hpp"

namespace distrun::scenario {

std::string index_str(const Shape& shape, int64_t flat) {
  std::vector<int64_t> idx(shape.size());
  for (int d = int(shape.size()) - 1; d >= 0; --d) {
    idx[size_t(d)] = shape[size_t(d)] ? flat % shape[size_t(d)] : 0;
    flat = shape[size_t(d)] ? flat / shape[size_t(d)] : 0;
  }
  std::string out = "[";
  for (size_t d = 0; d < idx.size(); ++d) out += (d ? ", " : "") + std::to_string(idx[d]);
  return out + "]";
}

namespace {

Tensor to_cpu(const Tensor& t) { return t.defined() && t.device().is_cuda() ? t.to(Device::cpu()) : t; }

std::string number_str(double v) {
  std::ostringstream ss;
  ss.precision(9);
  ss << v;
  return ss.str();
}

// One rank's share of one step: what it prints, its results records and its check failures.
struct StepReport {
  std::string text;
  std::vector<std::string> records;
  std::vector<std::string> problems;
  int64_t wrong = 0;

  nlohmann::ordered_json to_json() const { return {{"text", text}, {"records", records}, {"problems", problems}, {"wrong", wrong}}; }
};

class Runner {
 public:
  Runner(Scenario& sc, const Reference& ref, std::shared_ptr<Backend> world, const RunSettings& settings)
      : sc_(sc), ref_(ref), world_(std::move(world)), settings_(settings) {
    env_ = ref.env(world_->rank());
    env_.local_rank = settings.local_rank;
    env_.local_world_size = settings.local_world_size;
  }

  int run() {
    std::shared_ptr<ResultsFile> results = settings_.results_file;
    if (!results && world_->rank() == 0 && !settings_.results_path.empty())
      results = std::make_shared<ResultsFile>(settings_.results_path);
    // Every rank creates every group, in file order, as Backend::new_group requires.
    for (const auto& g : sc_.groups) groups_[g.name] = world_->new_group(g.members);
    for (const auto& [name, spec] : sc_.tensors)
      state_[name] = make_tensor(spec, sc_.dtype, env_, sc_.file).to(settings_.device);
    std::vector<std::string> lines;
    int64_t wrong_here = 0;
    for (auto& step : sc_.steps) {
      FlightOrigin origin(sc_.file + ":" + std::to_string(step.mark.line));  // into the flight recorder
      StepReport report = run_step(step);
      wrong_here += report.wrong;
      collect(step, report, lines);
    }
    // Every rank learns whether any rank saw a wrong value, so every rank exits 1.
    Tensor total = Tensor::empty({1}, DType::Int64);
    total.data_as<int64_t>()[0] = wrong_here;
    Tensor dev_total = total.to(settings_.device);
    world_->all_reduce(dev_total, AllreduceOptions{});
    const int64_t wrong_total = to_cpu(dev_total).data_as<int64_t>()[0];
    if (results) results->commit(lines);
    if (world_->rank() == 0 && wrong_total > 0)
      *settings_.err << "distrun: check failed: " << wrong_total << " wrong element" << (wrong_total == 1 ? "" : "s")
                     << " in scenario '" << sc_.name << "'" << std::endl;
    return wrong_total > 0 ? 1 : 0;
  }

 private:
  // Gathers every rank's report to rank 0, which prints them in rank order.
  void collect(const Step& step, const StepReport& mine, std::vector<std::string>& lines) {
    const auto all = gather_object(*world_, mine.to_json(), 0);
    if (world_->rank() != 0) return;
    for (const auto& r : all) {
      const std::string text = r["text"].get<std::string>();
      if (step.print && !text.empty()) *settings_.out << text;
      for (const auto& p : r["problems"]) *settings_.err << "distrun: " << p.get<std::string>() << "\n";
      for (const auto& l : r["records"]) lines.push_back(l.get<std::string>());
    }
    settings_.out->flush();
    settings_.err->flush();
  }

  Backend* backend_for(const Step& s) {
    if (!s.group) return world_.get();
    return groups_.at(*s.group).get();  // nullptr: not a member
  }

  Tensor input(const Step& s) {
    if (s.input.spec) return make_tensor(*s.input.spec, sc_.dtype, env_, sc_.file).to(settings_.device);
    return state_.at(s.input.name);
  }

  const Expected& expected(const Step& s) const { return ref_.expected(s.index, world_->rank()); }

  Tensor empty_like_expected(const Step& s) const {
    const Tensor& e = expected(s).tensor.value;
    return Tensor::empty(e.shape(), e.dtype(), settings_.device);
  }

  StepReport run_step(Step& s) {
    Backend* b = backend_for(s);
    std::optional<Tensor> result;
    std::optional<nlohmann::ordered_json> object;
    StepReport report;
    const int me = world_->rank();
    if (b) {
      switch (s.op) {
        case Op::Broadcast: {
          Tensor t = me == s.src ? input(s).clone() : empty_like_expected(s);
          BroadcastOptions o;
          o.root = b->group_rank(s.src);
          b->broadcast(t, o);
          result = t;
          break;
        }
        case Op::Scatter: {
          Tensor in;
          if (me == s.src) {
            in = input(s);
          } else {
            // Only src's values matter; the others pass a buffer of the same shape.
            Shape full = expected(s).tensor.value.shape();
            full[size_t(s.dim)] *= b->size();
            in = Tensor::zeros(full, expected(s).tensor.value.dtype(), settings_.device);
          }
          result = scatter(*b, in, b->group_rank(s.src), s.dim);
          break;
        }
        case Op::Gather: {
          Tensor t = gather(*b, input(s), b->group_rank(s.dst), s.dim);
          if (me == s.dst) result = t;
          break;
        }
        case Op::AllGather: result = all_gather(*b, input(s), s.dim); break;
        case Op::Reduce: {
          Tensor t = input(s).clone();
          ReduceOptions o;
          o.root = b->group_rank(s.dst);
          o.op = s.reduce;
          b->reduce(t, o);
          if (me == s.dst) result = t;
          break;
        }
        case Op::AllReduce: {
          Tensor t = input(s).clone();
          AllreduceOptions o;
          o.op = s.reduce;
          b->all_reduce(t, o);
          result = t;
          break;
        }
        case Op::ReduceScatter: result = reduce_scatter(*b, input(s), s.dim, s.reduce); break;
        case Op::AllToAll: {
          std::vector<int64_t> splits;
          for (const auto& n : s.split_sizes) splits.push_back(int64_t(eval_number(n, env_)));
          result = all_to_all(*b, input(s), s.dim, splits);
          break;
        }
        case Op::SendRecv: {
          Tensor t = send_recv(s, *b);
          if (t.defined()) result = t;
          break;
        }
        case Op::Barrier: b->barrier(BarrierOptions{}); break;
        case Op::Map: {
          if (s.ranks && std::find(s.ranks->begin(), s.ranks->end(), me) == s.ranks->end()) break;
          std::map<std::string, Tensor> inputs;
          for (const auto& name : map_tensor_names(*s.expr)) inputs[name] = to_cpu(state_.at(name));
          const Tensor& shape_of = expected(s).tensor.value;
          result = apply_map(*s.expr, inputs, shape_of.shape(), shape_of.dtype(), env_).to(settings_.device);
          break;
        }
        case Op::LocalReduce:
          result = local_reduce(to_cpu(input(s)), s.reduce, s.local_dim, s.keepdim).to(settings_.device);
          break;
        case Op::AllGatherObject: {
          nlohmann::ordered_json list = nlohmann::ordered_json::array();
          for (auto& o : all_gather_object(*b, substitute_object(s.object, env_))) list.push_back(o);
          object = list;
          break;
        }
        case Op::GatherObject: {
          auto got = gather_object(*b, substitute_object(s.object, env_), b->group_rank(s.dst));
          if (me == s.dst) {
            nlohmann::ordered_json list = nlohmann::ordered_json::array();
            for (auto& o : got) list.push_back(o);
            object = list;
          }
          break;
        }
        case Op::BroadcastObject:
          object = broadcast_object(*b, substitute_object(s.object, env_), b->group_rank(s.src));
          break;
        case Op::Bench: {
          BenchContext ctx;
          ctx.scenario = sc_.name;
          ctx.step = s.index;
          ctx.backend_name = settings_.backend_name;
          ctx.device = settings_.device;
          ctx.check = s.check;
          ctx.dtype = s.bench.dtype.value_or(sc_.dtype);
          // Rank 0 prints each row as its size completes; when rank 0 is not a member of the
          // step's group, the group's first member sends its table with the step's report.
          ctx.out = me == 0 ? settings_.out : nullptr;
          const BenchResult res = run_bench(*b, s.bench, ctx);
          if (b->rank() == 0) {
            report.records = res.rows;
            if (s.check) report.wrong = res.wrong;
            if (me != 0) report.text = res.table;
            if (res.wrong > 0 && s.check)
              report.problems.push_back("check failed: " + where(s) + " " + op_name(s.bench.collective) + ": " +
                                        std::to_string(res.wrong) + " wrong elements");
          }
          return report;
        }
      }
    }
    if (result) {
      state_[s.output] = *result;
      report_tensor(s, to_cpu(*result), report);
    } else if (object) {
      report_object(s, *object, report);
    } else if (expected(s).has_result) {
      report.problems.push_back(where(s) + " on rank " + std::to_string(me) + ": no result, the reference has one");
      report.wrong += 1;
    }
    return report;
  }

  Tensor send_recv(const Step& s, Backend& b) {
    const int me = world_->rank();
    SendOptions o;
    o.tag = s.index;
    if (me == s.src) {
      Tensor t = input(s);
      if (s.async) b.isend(t, b.group_rank(s.dst), o)->wait();
      else b.send(t, b.group_rank(s.dst), o);
      return Tensor();
    }
    if (me == s.dst) {
      Tensor t = empty_like_expected(s);
      if (s.async) b.irecv(t, b.group_rank(s.src), o)->wait();
      else b.recv(t, b.group_rank(s.src), o);
      return t;
    }
    return Tensor();
  }

  std::string where(const Step& s) const { return "step " + std::to_string(s.index) + " (" + op_name(s.op) + ")"; }

  std::string header(const Step& s) const {
    std::string h = "Rank " + std::to_string(world_->rank()) + " after " + op_name(s.op);
    switch (s.op) {
      case Op::Reduce:
      case Op::AllReduce:
      case Op::ReduceScatter:
      case Op::LocalReduce: h += std::string(" (") + reduce_op_name(s.reduce) + ")"; break;
      case Op::SendRecv: h += " (from rank " + std::to_string(s.src) + ")"; break;
      default: break;
    }
    return h;
  }

  nlohmann::ordered_json record_head(const Step& s) const {
    nlohmann::ordered_json r;
    r["scenario"] = sc_.name;
    r["step"] = s.index;
    r["op"] = op_name(s.op);
    r["rank"] = world_->rank();
    return r;
  }

  void report_tensor(const Step& s, const Tensor& got, StepReport& report) {
    const Expected& want = expected(s);
    int64_t wrong = 0;
    if (s.check) {
      if (!want.has_result) {
        report.problems.push_back(where(s) + " on rank " + std::to_string(world_->rank()) +
                                  ": a result where the reference has none");
        wrong = 1;
      } else {
        int64_t first = -1;
        wrong = count_wrong(got, want.tensor, &first);
        if (wrong > 0) {
          std::string detail;
          if (got.shape() != want.tensor.value.shape() || got.dtype() != want.tensor.value.dtype())
            detail = "got " + std::string(dtype_name(got.dtype())) + " " + shape_str(got.shape()) + ", expected " +
                     dtype_name(want.tensor.value.dtype()) + " " + shape_str(want.tensor.value.shape());
          else
            detail = "first at index " + index_str(got.shape(), first) + ": got " + number_str(got.get(first)) +
                     ", expected " + number_str(want.tensor.value.get(first));
          report.problems.push_back("check failed: " + where(s) + " on rank " + std::to_string(world_->rank()) + ": " +
                                    std::to_string(wrong) + " of " + std::to_string(got.numel()) + " elements of '" +
                                    s.output + "' wrong; " + detail);
        }
      }
    }
    report.wrong += wrong;
    // Text and records only when someone reads them: for a large tensor they dwarf the data.
    if (s.print)
      report.text = header(s) + ": " + s.output + " shape " + shape_str(got.shape()) + "\n" + format_values(got) + "\n";
    if (!records_wanted()) return;
    auto r = record_head(s);
    r["name"] = s.output;
    r["shape"] = got.shape();
    r["dtype"] = dtype_name(got.dtype());
    r["values"] = values_json(got);
    r["wrong"] = wrong;
    report.records.push_back(r.dump());
  }

  void report_object(const Step& s, const nlohmann::ordered_json& got, StepReport& report) {
    const Expected& want = expected(s);
    int64_t wrong = 0;
    if (s.check && (!want.object || *want.object != got)) {
      wrong = 1;
      report.problems.push_back("check failed: " + where(s) + " on rank " + std::to_string(world_->rank()) + ": got " +
                                got.dump() + ", expected " + (want.object ? want.object->dump() : "no result"));
    }
    report.wrong += wrong;
    if (s.print) report.text = header(s) + ": " + python_repr(got) + "\n";
    if (!records_wanted()) return;
    auto r = record_head(s);
    r["object"] = got;
    r["wrong"] = wrong;
    report.records.push_back(r.dump());
  }

  // Every rank is given the results path (rank 0 writes the file), so all agree on this.
  bool records_wanted() const { return !settings_.results_path.empty() || settings_.results_file != nullptr; }

  Scenario& sc_;
  const Reference& ref_;
  std::shared_ptr<Backend> world_;
  RunSettings settings_;
  RankEnv env_;
  std::map<std::string, std::shared_ptr<Backend>> groups_;
  std::map<std::string, Tensor> state_;
};

}  // namespace

int run_scenario(Scenario& scenario, const Reference& reference, const std::shared_ptr<Backend>& world,
                 const RunSettings& settings) {
  return Runner(scenario, reference, world, settings).run();
}

}  // namespace distrun::scenario
