#include "distrun/scenario/run/runner.hpp"

#include <optional>
#include <sstream>

#include "distrun/backend/flight_recorder.hpp"
#include "distrun/comm/collectives.hpp"
#include "distrun/scenario/model/op_table.hpp"
#include "distrun/scenario/ops/step_runner.hpp"
#include "distrun/scenario/output/format.hpp"
#include "distrun/scenario/output/json_values.hpp"
#include "distrun/scenario/output/results_file.hpp"
#include "distrun/scenario/ops/ops.hpp"

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

std::string number_str(double v) {
  std::ostringstream ss;
  ss.precision(9);
  ss << v;
  return ss.str();
}

class Runner final : public StepRunner {
 public:
  Runner(const Scenario& sc, const Reference& ref, std::shared_ptr<Backend> world, const RunSettings& settings)
      : sc_(sc), ref_(ref), world_(std::move(world)), settings_(settings) {
    env_ = ref.env(world_->rank());
    env_.local_rank = settings.local_rank;
    env_.local_world_size = settings.local_world_size;
  }

  int run() {
    std::shared_ptr<ResultsFile> results = settings_.results_file;
    if (!results && world_->rank() == 0 && !settings_.results_path.empty())
      results = std::make_shared<ResultsFile>(settings_.results_path, sc_.file);
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
    return groups_.at(s.group.str()).get();  // nullptr: not a member
  }

  int rank() const override { return world_->rank(); }
  const Scenario& scenario() const override { return sc_; }
  const RankEnv& env() const override { return env_; }
  const RunSettings& settings() const override { return settings_; }
  const Tensor& tensor(const std::string& name) const override { return state_.at(name); }

  Tensor input(const Step& s) override {
    if (s.args().input.spec)
      return make_tensor(*s.args().input.spec, sc_.dtype, env_, sc_.file, s.origin()).to(settings_.device);
    return state_.at(s.input.str());
  }

  const Expected& expected(const Step& s) const override { return ref_.expected(s.index, world_->rank()); }

  Tensor empty_like_expected(const Step& s) const override {
    const Tensor& e = expected(s).tensor.value;
    return Tensor::empty(e.shape(), e.dtype(), settings_.device);
  }

  StepReport run_step(const Step& s) {
    Backend* b = backend_for(s);
    StepOutput got;
    const int me = world_->rank();
    if (b) got = op_spec(s.op).run(*this, s, *b);
    if (got.report) return *got.report;
    StepReport report;
    const std::optional<Tensor>& result = got.tensor;
    const std::optional<nlohmann::ordered_json>& object = got.object;
    if (result) {
      state_[s.output.str()] = *result;
      report_tensor(s, to_cpu(*result), report);
    } else if (object) {
      report_object(s, *object, report);
    } else if (expected(s).has_result) {
      report.problems.push_back(where(s) + " on rank " + std::to_string(me) + ": no result, the reference has one");
      report.wrong += 1;
    }
    return report;
  }

  static std::string where(const Step& s) { return step_where(s); }

  std::string header(const Step& s) const {
    const auto detail = op_spec(s.op).header_detail;
    return "Rank " + std::to_string(world_->rank()) + " after " + op_name(s.op) + (detail ? detail(s) : "");
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
                                    s.output.str() + "' wrong; " + detail);
        }
      }
    }
    report.wrong += wrong;
    // Text and records only when someone reads them: for a large tensor they dwarf the data.
    if (s.print)
      report.text =
          header(s) + ": " + s.output.str() + " shape " + shape_str(got.shape()) + "\n" + format_values(got) + "\n";
    if (!records_wanted()) return;
    auto r = record_head(s);
    r["name"] = s.output.str();
    r["shape"] = got.shape();
    r["dtype"] = dtype_name(got.dtype());
    r["values"] = values_json(got);
    r["wrong"] = wrong;
    report.records.push_back(dump_lossless(r));
  }

  void report_object(const Step& s, const nlohmann::ordered_json& got, StepReport& report) {
    const Expected& want = expected(s);
    int64_t wrong = 0;
    if (s.check && (!want.object || !same_json(*want.object, got))) {
      wrong = 1;
      report.problems.push_back("check failed: " + where(s) + " on rank " + std::to_string(world_->rank()) + ": got " +
                                dump_lossless(got) + ", expected " +
                                (want.object ? dump_lossless(*want.object) : "no result"));
    }
    report.wrong += wrong;
    if (s.print) report.text = header(s) + ": " + python_repr(got) + "\n";
    if (!records_wanted()) return;
    auto r = record_head(s);
    r["object"] = got;
    r["wrong"] = wrong;
    report.records.push_back(dump_lossless(r));
  }

  // Every rank is given the results path (rank 0 writes the file), so all agree on this.
  bool records_wanted() const { return !settings_.results_path.empty() || settings_.results_file != nullptr; }

  const Scenario& sc_;
  const Reference& ref_;
  std::shared_ptr<Backend> world_;
  RunSettings settings_;
  RankEnv env_;
  std::map<std::string, std::shared_ptr<Backend>> groups_;
  std::map<std::string, Tensor> state_;
};

}  // namespace

int run_scenario(const Scenario& scenario, const Reference& reference, const std::shared_ptr<Backend>& world,
                 const RunSettings& settings) {
  return Runner(scenario, reference, world, settings).run();
}

}  // namespace distrun::scenario
