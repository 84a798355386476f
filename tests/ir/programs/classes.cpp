// C++ program: classes, templates, virtual dispatch, exceptions, lambdas.
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>
#include <algorithm>
#include <numeric>

template <typename T>
struct Vec2 {
  T x, y;
  Vec2 operator+(const Vec2 &o) const { return {x + o.x, y + o.y}; }
  T dot(const Vec2 &o) const { return x * o.x + y * o.y; }
};

struct Shape {
  virtual ~Shape() = default;
  virtual double area() const = 0;
};
struct Circle : Shape {
  double r;
  explicit Circle(double r) : r(r) {}
  double area() const override { return M_PI * r * r; }
};
struct Square : Shape {
  double s;
  explicit Square(double s) : s(s) {}
  double area() const override { return s * s; }
};

double total_area(const std::vector<std::unique_ptr<Shape>> &shapes) {
  double t = 0;
  for (const auto &s : shapes) t += s->area();
  if (t < 0) throw std::runtime_error("negative area");
  return t;
}

double safe_sqrt(double x) {
  try {
    if (x < 0) throw std::domain_error("negative");
    return std::sqrt(x);
  } catch (const std::exception &e) {
    return -1.0;
  }
}

template <typename F>
double integrate(F f, double a, double b, int n) {
  double h = (b - a) / n, s = 0;
  for (int i = 0; i < n; i++) s += f(a + (i + 0.5) * h);
  return s * h;
}

double run(int n) {
  std::vector<std::unique_ptr<Shape>> shapes;
  shapes.push_back(std::make_unique<Circle>(1.0));
  shapes.push_back(std::make_unique<Square>(2.0));
  Vec2<double> v{1, 2}, w{3, 4};
  std::vector<double> xs(n);
  std::iota(xs.begin(), xs.end(), 0.0);
  std::sort(xs.begin(), xs.end(), [](double a, double b) { return a > b; });
  double k = 2.0;
  double integral = integrate([k](double x) { return std::exp(-k * x * x); }, 0.0, 1.0, n);
  std::string label = "area" + std::to_string(n);
  return total_area(shapes) + (v + w).dot(w) + safe_sqrt(-1) + integral + xs[0] +
         static_cast<double>(label.size());
}

int main() { return static_cast<int>(run(10)); }
