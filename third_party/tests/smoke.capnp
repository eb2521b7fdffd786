@0xd2a7b1c9e4f30a51;

struct Point {
  x @0 :Int32;
  y @1 :Int32;
  label @2 :Text;
  tags @3 :List(Text);
}
