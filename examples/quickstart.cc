// Lumen's quickstart: remote tasks, futures, Put/Get through shared memory, and
// Wait, on an embedded local cluster started by lumen::Init.
//
//   scripts/quickstart            # builds and runs this
#include <lumen/lumen.h>

#include <chrono>
#include <iostream>
#include <numeric>
#include <string>
#include <vector>

int Plus(int a, int b) { return a + b; }

double Sum(std::vector<double> values) { return std::accumulate(values.begin(), values.end(), 0.0); }

std::string Greet(std::string name) { return "hello, " + name; }

// A task that submits tasks of its own and waits for them.
int Fibonacci(int n) {
  if (n < 2) return n;
  auto a = lumen::Task(Fibonacci).Remote(n - 1);
  auto b = lumen::Task(Fibonacci).Remote(n - 2);
  return *lumen::Get(a) + *lumen::Get(b);
}

int Fails(int x) {
  if (x > 0) throw std::invalid_argument("x must not be positive, got " + std::to_string(x));
  return x;
}

LUMEN_REMOTE(Plus, Sum, Greet, Fibonacci, Fails);

int main(int argc, char** argv) {
  lumen::Init(argc, argv);  // no address: an embedded local cluster

  // Tasks return futures; Get waits for the value.
  lumen::ObjectRef<int> three = lumen::Task(Plus).Remote(1, 2);
  std::cout << "Plus(1, 2) = " << *lumen::Get(three) << "\n";

  // Futures are arguments too: this runs once `three` is ready.
  auto six = lumen::Task(Plus).Remote(three, three);
  std::cout << "Plus(three, three) = " << *lumen::Get(six) << "\n";

  // Many tasks at once.
  std::vector<lumen::ObjectRef<std::string>> greetings;
  for (const char* name : {"ada", "grace", "linus"}) {
    greetings.push_back(lumen::Task(Greet).Remote(std::string(name)));
  }
  for (const auto& g : lumen::Get(greetings)) std::cout << *g << "\n";

  // A large value goes to the node's shared-memory store once; tasks read it there.
  auto big = lumen::Put(std::vector<double>(4 << 20, 0.5));  // 32 MiB
  std::cout << "Sum of 4Mi halves = " << *lumen::Get(lumen::Task(Sum).Remote(big)) << "\n";
  auto view = lumen::GetArray(big);  // zero-copy view into shared memory
  std::cout << "GetArray sees " << view.size() << " doubles without copying\n";

  // Nested tasks.
  std::cout << "Fibonacci(10) = " << *lumen::Get(lumen::Task(Fibonacci).Remote(10)) << "\n";

  // Wait returns what is ready.
  std::vector<lumen::ObjectRef<int>> refs;
  for (int i = 0; i < 4; ++i) refs.push_back(lumen::Task(Plus).Remote(i, i));
  auto ready = lumen::Wait(refs, 4, std::chrono::seconds(10));
  std::cout << "Wait: " << ready.ready.size() << " ready, " << ready.unready.size()
            << " not ready\n";

  // A task that throws: Get rethrows its error here.
  try {
    lumen::Get(lumen::Task(Fails).Remote(7));
  } catch (const lumen::TaskError& e) {
    std::cout << "Fails(7) threw " << e.exception_type() << ": " << e.task_message() << "\n";
  }

  lumen::Shutdown();
  std::cout << "done\n";
  return 0;
}
